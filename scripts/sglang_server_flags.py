"""Write the command-line flags ``sglang.launch_server`` accepts to a JSON fixture, read from the
wheel's source with ``ast`` (sglang itself cannot be imported here: it needs torch and a GPU).

Usage (tests/fixtures/sglang/README.md, "Server arguments")::

    pip download sglang==0.5.20 --no-deps -d /tmp/sgl
    unzip -q /tmp/sgl/sglang-0.5.20-*.whl -d /tmp/sgl/0.5.20
    python scripts/sglang_server_flags.py /tmp/sgl/0.5.20/sglang tests/fixtures/sglang/0.5.20/server_args.json

Where the flags come from (SGLang 0.5.20 and 0.5.23, ``python/sglang/srt/``):

- ``arg_groups/fields/*.py``: one ``msgspec.Struct`` per namespace whose fields are annotated
  ``A[T, "help"]`` or ``A[T, Arg(...)]``; ``arg_groups/arg_utils.py``
  ``add_cli_args_from_dataclass`` turns each into a flag: ``Arg.cli_name`` or ``--`` + the field
  name with ``_`` → ``-``, plus ``Arg.aliases``; skipped when ``Arg(no_cli=True)``; an
  ``Arg.action`` wins (``argparse.BooleanOptionalAction`` adds ``--no-<flag>`` too); then a
  ``Literal`` type gives a value with those choices, ``list[...]`` one or more values, ``bool``
  ``store_true``, any other type one value.
- ``server_args.py`` ``ServerArgs.add_cli_args``: a few ``parser.add_argument`` calls written
  by hand (``--reasoning-parser``, ``--tool-call-parser``, ``--config``, deprecated flags); their
  choices are recorded when written as a literal list. The two parsers' choices are computed at
  run time: ``"auto"`` plus the keys of ``ReasoningParser.DetectorMap``
  (``parser/reasoning_parser.py``) and of ``FunctionCallParser.ToolCallParserEnum``
  (``function_call/function_call_parser.py``), read here from those dict literals.

The output maps each flag to ``{"takes_value": bool, "choices": [...] | null, "source": file}``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "server_flags"]

_VALUELESS_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def _action_name(node: ast.AST) -> str:
    """``"store_true"`` for a string literal, else the dotted name (``argparse.BooleanOptionalAction``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


def _subscript_args(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Subscript):
        inner = node.slice
        return list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
    return []


def _type_name(node: ast.AST) -> str:
    base = node.value if isinstance(node, ast.Subscript) else node
    return ast.unparse(base).split(".")[-1]


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and _type_name(node) == "Optional":
        return _subscript_args(node)[0]
    if isinstance(node, ast.Subscript) and _type_name(node) == "Union":
        rest = [a for a in _subscript_args(node) if not (isinstance(a, ast.Constant) and a.value is None)]
        return rest[0] if len(rest) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(other, ast.Constant) and other.value is None:
                return side
    return node


def _field_flags(name: str, annotation: ast.AST) -> dict[str, dict[str, Any]]:
    """The flags of one ``A[T, meta]`` field (``add_cli_args_from_dataclass``), or none."""
    if not (isinstance(annotation, ast.Subscript) and _type_name(annotation) in ("A", "Annotated")):
        return {}
    args = _subscript_args(annotation)
    if len(args) < 2:
        return {}
    raw_type, metas = args[0], args[1:]
    meta: dict[str, ast.AST] = {}
    for m in metas:
        if isinstance(m, ast.Constant) and isinstance(m.value, str):
            break
        if isinstance(m, ast.Call) and _type_name(m.func) == "Arg":
            meta = {k.arg: k.value for k in m.keywords if k.arg}
            break
    else:
        return {}  # no Arg / help string: not a CLI field
    if _literal(meta.get("no_cli")) is True:
        return {}
    cli_name = _literal(meta.get("cli_name")) or "--" + name.replace("_", "-")
    names = [cli_name, *(_literal(meta.get("aliases")) or [])]
    choices = _literal(meta.get("choices"))
    inner = _unwrap_optional(raw_type)
    flags: dict[str, dict[str, Any]] = {}
    if "action" in meta:
        action = _action_name(meta["action"])
        takes_value = action not in _VALUELESS_ACTIONS and not action.endswith("BooleanOptionalAction")
        for n in names:
            flags[n] = {"takes_value": takes_value, "choices": choices, "action": action}
            if action.endswith("BooleanOptionalAction") and n.startswith("--"):
                flags["--no-" + n[2:]] = {"takes_value": False, "choices": None, "action": action}
        return flags
    kind = _type_name(inner)
    if kind == "Literal":
        choices = choices or [_literal(a) for a in _subscript_args(inner)]
        spec = {"takes_value": True, "choices": choices}
    elif kind in ("list", "List"):
        spec = {"takes_value": True, "choices": choices, "nargs": _literal(meta.get("nargs")) or "+"}
    elif kind == "bool":
        spec = {"takes_value": False, "choices": None, "action": "store_true"}
    else:
        spec = {"takes_value": True, "choices": choices}
    return {n: dict(spec) for n in names}


def _add_argument_flags(call: ast.Call) -> dict[str, dict[str, Any]]:
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    names = [n for n in names if n.startswith("-")]
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    action = _action_name(kw["action"]) if "action" in kw else "store"
    takes_value = action not in _VALUELESS_ACTIONS and not action.endswith(
        ("StoreTrueAction", "BooleanOptionalAction")
    )
    choices = _literal(kw.get("choices"))
    return {n: {"takes_value": takes_value, "choices": choices, "action": action} for n in names}


_PARSER_REGISTRIES = {
    "--reasoning-parser": ("parser/reasoning_parser.py", "ReasoningParser", "DetectorMap"),
    "--tool-call-parser": (
        "function_call/function_call_parser.py",
        "FunctionCallParser",
        "ToolCallParserEnum",
    ),
}
"""flag → (file under ``srt/``, class, dict attribute) whose keys, after ``"auto"``, are its choices."""


def _registry_keys(path: Path, class_name: str, attr: str) -> list[str] | None:
    """The string keys of the dict literal ``class_name.attr`` in ``path``, or None."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                target: ast.expr | None = None
                if isinstance(item, ast.AnnAssign):
                    target = item.target
                elif isinstance(item, ast.Assign) and len(item.targets) == 1:
                    target = item.targets[0]
                value = getattr(item, "value", None)
                if isinstance(target, ast.Name) and target.id == attr and isinstance(value, ast.Dict):
                    return [str(k.value) for k in value.keys if isinstance(k, ast.Constant)]
    return None


def server_flags(package: Path) -> dict[str, dict[str, Any]]:
    """Flag → ``{"takes_value", "choices", "source", ...}`` for the unpacked ``sglang`` package."""
    srt = package / "srt"
    found: dict[str, dict[str, Any]] = {}
    field_files = sorted((srt / "arg_groups" / "fields").glob("*.py"))
    for path in [*field_files, srt / "server_args.py"]:
        tree = ast.parse(path.read_text(), str(path))
        source = str(path.relative_to(package.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        for flag, spec in _field_flags(item.target.id, item.annotation).items():
                            found[flag] = {**spec, "source": source}
            if (
                path.name == "server_args.py"
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                for flag, spec in _add_argument_flags(node).items():
                    found[flag] = {**spec, "source": source}
    for flag, (file, class_name, attr) in _PARSER_REGISTRIES.items():
        keys = _registry_keys(srt / file, class_name, attr)
        if flag in found and keys:
            found[flag]["choices"] = ["auto", *keys]
            found[flag]["choices_from"] = f"sglang/srt/{file} {class_name}.{attr}"
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    """Write the flags of the package at ``argv[0]`` to ``argv[1]`` (JSON); returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path, help="the unpacked wheel's sglang/ folder")
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--version", required=False, help="recorded in the file (default: from the path)")
    args = parser.parse_args(argv)
    flags = server_flags(args.package)
    version = args.version or args.package.resolve().parent.name
    doc = {
        "sglang_version": version,
        "generated_by": "scripts/sglang_server_flags.py",
        "flags": flags,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: {len(flags)} flags of sglang {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
