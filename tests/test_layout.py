"""The package's house: one import order from the leaves to the top, and a public face per module."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "reasonkit"
# Each unit (a top-level module or a sub-package) imports only units before it.
ORDER = ["config", "presets", "template", "answers", "tasks", "data", "masks", "collate", "tunix_patches",
         "runtime", "models", "budget", "rewards", "train", "evaluate", "shapes", "plots", "checks",
         "testing", "__main__"]


def unit_of(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_units(path: pathlib.Path) -> set[str]:
    """The reasonkit units a file imports (absolute imports; the package uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert not node.level, f"{path}: relative import"
            names = [node.module] if node.module != "reasonkit" else \
                [f"reasonkit.{a.name}" for a in node.names]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("reasonkit.")}
    return found


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
