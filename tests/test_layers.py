"""The architecture, checked: imports point down the layers, each module states its public
surface, and no product module grows past one sitting's read.

Layers, top first (README, Architecture): ``launch`` → the components ``producers``,
``consumers``, ``sinks`` → the core ``streams``. ``simulator`` and ``bench`` are test doubles and
tools: no product package imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("streams", "producers", "consumers", "sinks", "launch")
COMPONENTS = ("producers", "consumers", "sinks")
MAX_LINES = 600

# what each package may import from the project (besides itself)
ALLOWED: dict[str, set[str]] = {
    "streams": set(),
    "producers": {"streams"},
    "consumers": {"streams"},
    "sinks": {"streams"},
    "launch": {"streams", "producers", "consumers", "sinks"},
    "simulator": {"streams"},
}
PROJECT = {*PRODUCT, "simulator", "bench", "tests"}


def _modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every import of a project module in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names)
    return [(m, names, line) for m, names, line in found if m.split(".")[0] in PROJECT]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in _modules(package):
            for module, _names, line in _imports(path):
                top = module.split(".")[0]
                if top != package and top not in allowed:
                    wrong.append(f"{_where(path, line)} imports {module}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _is_cli(module: str) -> bool:
    """A command-line module: ``cli`` or ``*_cli`` (``streams.cli``, the shared command-line layer,
    included) or a ``__main__``."""
    last = module.split(".")[-1]
    return last in ("cli", "__main__") or last.endswith("_cli")


def _imports_when_imported(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every project import that runs when ``path`` is imported: all of them
    but those under ``if __name__ == "__main__":``, which run only as ``python -m``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
    return [(m, line) for m, line in found if m.split(".")[0] in PROJECT]


def test_the_command_line_is_a_leaf() -> None:
    """No product module but a command-line one imports a command-line module: options are parsed
    once, by the command line, into objects its concern owns (README, Layers)."""
    wrong = []
    for path in _modules(*PRODUCT):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if _is_cli(module):
            continue
        wrong += [
            f"{_where(path, line)} imports {imported}"
            for imported, line in _imports_when_imported(path)
            if _is_cli(imported)
        ]
    assert not wrong, "product modules importing a command-line module:\n" + "\n".join(wrong)


def _public_surface(module: str) -> set[str] | None:
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    if not path.exists():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            return set(value)
    return set()


def test_every_product_module_declares_its_public_surface() -> None:
    missing = [
        str(p.relative_to(ROOT))
        for p in _modules(*PRODUCT, "simulator")
        if p.name not in ("__init__.py", "__main__.py") and "__all__" not in p.read_text()
    ]
    assert not missing, "modules without __all__:\n" + "\n".join(missing)


def test_other_packages_import_only_what_a_module_makes_public() -> None:
    wrong = []
    for path in _modules(*PRODUCT, "simulator", "bench"):
        own = path.relative_to(ROOT).parts[0]
        for module, names, line in _imports(path):
            if module.split(".")[0] == own or not names:
                continue
            public = _public_surface(module)
            if public is None:  # a package: its modules are imported by name
                continue
            for name in names:
                sub = ROOT / module.replace(".", "/") / f"{name}.py"
                if name not in public and not sub.exists() and not (sub.parent / name).is_dir():
                    wrong.append(f"{_where(path, line)}: {module}.{name} is not in its __all__")
    assert not wrong, "imports of names outside a module's __all__:\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", [*PRODUCT, "simulator"])
def test_no_module_passes_one_sittings_read(package: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


MAX_MODULES = 15
"""Modules one folder may hold (``__init__`` and ``__main__`` not counted): past it, a concern
inside the folder wants its own package (issue 27)."""


@pytest.mark.parametrize("package", [*PRODUCT, "simulator", "bench"])
def test_no_folder_holds_more_than_a_handful_of_modules(package: str) -> None:
    crowded = {}
    for folder in sorted({p.parent for p in _modules(package)}):
        names = [p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        if len(names) > MAX_MODULES:
            crowded[str(folder.relative_to(ROOT))] = len(names)
    assert not crowded, f"folders over {MAX_MODULES} modules: {crowded}"
