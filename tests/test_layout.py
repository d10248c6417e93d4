"""The package's house: one import order from the leaves to the top, and a public face per module."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "reasonkit"
# Each unit (a top-level module or a sub-package) imports only units before it.
ORDER = ["config", "presets", "template", "answers", "tasks", "data", "masks", "collate", "tunix_patches",
         "runtime", "models", "rewards", "train", "budget", "evaluate", "shapes", "notebook", "testing",
         "__main__"]
# Imports against the order, each named and temporary: none now.
LATE: set[tuple[str, str]] = set()


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
            if ORDER.index(other) > ORDER.index(unit) and (unit, other) not in LATE:
                late.append(f"{path.relative_to(ROOT)} ({unit}) imports {other}")
    assert late == []


def test_every_public_module_declares_its_public_names():
    missing = [str(p.relative_to(ROOT)) for p in sources()
               if p.name != "__main__.py" and not p.name.startswith("_") or p.name == "__init__.py"
               if "__all__" not in p.read_text()]
    assert missing == []


def test_imports_by_name_count_as_imports(tmp_path):
    code = ("import importlib\nfrom importlib import import_module\n"
            "a = importlib.import_module('reasonkit.train._stages')\n"
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


# --- small public faces -----------------------------------------------------------------

PUBLIC_NAMES = 250  # at most, in the whole package (issue 65 item 3; 646 before)
OUTSIDE = ("notebooks/*.py", "benchmarks/**/*.py", "scripts/**/*.py")


def subpackages() -> list[str]:
    return sorted(p.parent.name for p in PKG.glob("*/__init__.py"))


def private_path(path: pathlib.Path) -> bool:
    """A module nobody outside its package imports: a name with a leading underscore on its path."""
    return any(x.startswith("_") and x not in ("__init__.py", "__main__.py")
               for x in path.relative_to(PKG).parts)


def public_names(path: pathlib.Path) -> list[str]:
    """A module's own top-level names without a leading underscore: defs, classes and
    assignments (names it imports, or re-exports, are not its own)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def test_few_public_names():
    """Public names live in public modules: a sub-package's modules are private behind its
    face, and a top-level module's helpers that only it uses have a leading underscore."""
    counts = {str(p.relative_to(ROOT)): len(public_names(p)) for p in sorted(PKG.rglob("*.py"))
              if "assets" not in p.parts and p.name != "__main__.py" and not private_path(p)}
    most = sorted(counts.items(), key=lambda kv: -kv[1])[:10]
    assert sum(counts.values()) <= PUBLIC_NAMES, f"{sum(counts.values())} public names; most in {most}"


def face_violations(path: pathlib.Path) -> list[str]:
    """What ``path`` imports of a sub-package (not its own) past the sub-package's face: a
    module of it (``reasonkit.train._stages``, ``reasonkit.models._lora``), or a private name
    from the face (``from reasonkit.models import _lora``)."""
    own = unit_of(path) if path.is_relative_to(PKG) else None
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    subs = set(subpackages())
    found = []
    for name in imported_modules(path):
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "reasonkit" and parts[1] in subs and parts[1] != own:
            found.append(f"{where} imports {name}")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "reasonkit":
            parts = node.module.split(".")
            if len(parts) == 2 and parts[1] in subs and parts[1] != own:
                found += [f"{where} imports {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
    return found


def test_code_outside_a_subpackage_imports_only_its_face():
    """The package's other units, the notebooks, the benchmarks and the scripts import a
    sub-package's face (``from reasonkit.models import load_model``), never its modules;
    tests may reach past it."""
    files = {p for p in PKG.rglob("*.py") if "assets" not in p.parts}
    files |= {p for pattern in OUTSIDE for p in ROOT.glob(pattern)}
    found = [v for p in sorted(files) for v in face_violations(p)]
    assert found == []


def test_face_violations_are_found(tmp_path):
    code = ("from reasonkit.models import load_model, _lora\nimport reasonkit.train._stages\n"
            "from reasonkit.data._records import read_jsonl\nfrom reasonkit import models\n")
    (tmp_path / "m.py").write_text(code)
    found = [v.split(" imports ")[1] for v in face_violations(tmp_path / "m.py")]
    assert found == ["reasonkit.train._stages", "reasonkit.data._records", "reasonkit.models._lora"]
