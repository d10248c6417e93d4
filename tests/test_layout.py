"""The package's house: one import order from the leaves to the top, and a public face per module."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "reasonkit"
# Each unit (a top-level module or a sub-package) imports only units before it.
ORDER = ["config", "presets", "template", "answers", "tasks", "data", "masks", "collate", "tunix_patches",
         "runtime", "models", "rewards", "train", "budget", "evaluate", "shapes", "plots", "checks",
         "testing", "__main__"]


def unit_of(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


BOOTSTRAP = ROOT / "reasonkit_bootstrap.py"
DYNAMIC = ("import_module", "__import__")  # importlib.import_module("x"), __import__("x")


def imported_modules(path: pathlib.Path) -> list[str]:
    """The modules a file imports: in import statements, and by name in
    ``importlib.import_module("...")`` or ``__import__("...")`` (absolute imports; the
    package uses no relative ones). ``from reasonkit import x`` counts as ``reasonkit.x``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert not node.level, f"{path}: relative import"
            found += [node.module] if node.module != "reasonkit" else \
                [f"reasonkit.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and _dynamic(node.func) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append(node.args[0].value)
    return found


def _dynamic(func: ast.expr) -> bool:
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) in DYNAMIC


def imported_units(path: pathlib.Path) -> set[str]:
    """The reasonkit units a file imports (:func:`imported_modules`)."""
    return {n.split(".")[1] for n in imported_modules(path) if n.startswith("reasonkit.")}


def sources() -> list[pathlib.Path]:
    return sorted(p for p in PKG.rglob("*.py") if "assets" not in p.parts and p.name != "__init__.py"
                  or p.parent != PKG and p.name == "__init__.py")


def test_every_unit_has_its_place_in_the_order():
    units = {unit_of(p) for p in sources()}
    assert units == set(ORDER), f"not in ORDER: {units - set(ORDER)}; gone: {set(ORDER) - units}"


def test_each_unit_imports_only_the_units_before_it():
    late = []
    for path in sources():
        unit = unit_of(path)
        for other in imported_units(path) - {unit}:
            if ORDER.index(other) > ORDER.index(unit):
                late.append(f"{path.relative_to(ROOT)} ({unit}) imports {other}")
    assert late == []


def test_every_public_module_declares_its_public_names():
    missing = [str(p.relative_to(ROOT)) for p in sources()
               if p.name != "__main__.py" and not p.name.startswith("_") or p.name == "__init__.py"
               if "__all__" not in p.read_text()]
    assert missing == []


def test_imports_by_name_count_as_imports(tmp_path):
    code = ("import importlib\nfrom importlib import import_module\n"
            "a = importlib.import_module('reasonkit.train.stages')\n"
            "b = import_module('reasonkit.models')\nc = __import__('reasonkit.plots')\n"
            "d = importlib.import_module(name)\n")
    (tmp_path / "m.py").write_text(code)
    assert imported_units(tmp_path / "m.py") == {"train", "models", "plots"}


def test_the_bootstrap_imports_nothing_of_reasonkit():
    """The notebooks' first cell runs reasonkit_bootstrap before reasonkit is importable: it
    imports nothing of reasonkit, in statements, by name, or by a name built at run time (it
    calls no import_module or __import__ at all), and names no reasonkit module in a string."""
    text = BOOTSTRAP.read_text()
    tree = ast.parse(text)
    assert [m for m in imported_modules(BOOTSTRAP) if m.split(".")[0] == "reasonkit"] == []
    calls = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and _dynamic(n.func)]
    assert calls == []
    assert not re.search(r"^\s*(from reasonkit[\s.]|import reasonkit\b)", text, re.M)
    assert not re.search(r"[\"']reasonkit[.\"']", text)


def test_the_package_does_not_import_the_bootstrap():
    """The runtime is a leaf: what it needs of the bootstrap (where Kaggle mounts inputs) is
    its own (runtime.platform); the bootstrap is the notebooks' first cell, not a library."""
    found = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
             if any(m.split(".")[0] == BOOTSTRAP.stem for m in imported_modules(p))]
    assert found == []
