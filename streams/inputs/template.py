"""Prompt templates (``--template``, ``--system-template``): the user and system messages rendered
from any fields of a row, nested ones included, by Jinja2's sandbox (docs/inputs.md, "Templates").

Strict: a field the template reads that the row lacks, or prints while it is null, makes the row
a bad row naming the field (e.g. ``instances[0].input is missing``), never an empty string.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

import jinja2
from jinja2 import StrictUndefined, nodes
from jinja2.meta import find_undeclared_variables
from jinja2.sandbox import ImmutableSandboxedEnvironment

from streams.errors import ConfigError
from streams.inputs.fields import fail, shortened

__all__ = ["PromptTemplate", "load_template", "prompt_template"]

_Step = tuple[str, Any]  # ("attr", name) or ("item", key)
_FieldPath = tuple[str, tuple[_Step, ...]]


class _Missing(Exception):
    """A field the template read is not in the row, or null there (``null``): ``parent[name]``
    (parent None: top level)."""

    def __init__(self, parent: object, name: object, *, null: bool = False) -> None:
        super().__init__(name)
        self.parent, self.name, self.null = parent, name, null


class _Null(Exception):
    """An expression the template prints is null."""


class _StrictField(StrictUndefined):
    """StrictUndefined that tells which lookup failed, so the bad row can name the field."""

    def _fail_with_undefined_error(self, *args: object, **kwargs: object) -> NoReturn:
        if self._undefined_hint is not None:  # e.g. the sandbox's "access to attribute ... is unsafe"
            raise self._undefined_exception(self._undefined_hint)
        parent = None if self._undefined_obj is jinja2.utils.missing else self._undefined_obj
        raise _Missing(parent, self._undefined_name, null=isinstance(self, _NullField))


class _NullField(_StrictField):
    """A field that is null in the row: as missing as an absent one (``is defined`` is false,
    ``default`` applies, printing it or testing it is a bad row naming it)."""


# Undefined binds its operators (__getitem__, __str__, __iter__ ...) to its own failing method when
# its class is made: bind them to ours, so every use of a missing field names it.
for _name, _value_of in {**vars(jinja2.Undefined), **vars(StrictUndefined)}.items():
    if _value_of is jinja2.Undefined._fail_with_undefined_error:
        setattr(_StrictField, _name, _StrictField._fail_with_undefined_error)


def _printed(value: object) -> object:
    if value is None:
        raise _Null
    return value


class _RowSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with ``a.b`` on a mapping reading its key ``b`` only: a row's fields are data,
    so ``meta.items`` is the field ``items``, never the dict's method (missing: a bad row)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


_ENV: Final = _RowSandbox(undefined=_StrictField, autoescape=False, finalize=_printed)


def _unmarked(value: Any) -> Any:
    """``value`` with its :class:`_NullField` marks back to null (for ``tojson``)."""
    if isinstance(value, _NullField):
        return None
    if isinstance(value, Mapping):
        return {key: _unmarked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


_ENV.filters["tojson"] = lambda value, indent=None: json.dumps(
    _unmarked(value), ensure_ascii=False, indent=indent
)


def _with_nulls_marked(value: Any, parent: Any = None, name: Any = None) -> Any:
    """``value`` with every null (a dict's value, a list's item) replaced by a :class:`_NullField`
    that knows where it was; containers are copied, the row itself is not changed."""
    if value is None:
        return _NullField(obj=jinja2.utils.missing if parent is None else parent, name=name)
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            copy[key] = _with_nulls_marked(item, copy, key)
        return copy
    if isinstance(value, list):
        items: list[Any] = []
        for i, item in enumerate(value):
            items.append(_with_nulls_marked(item, items, i))
        return items
    return value


def load_template(value: str, flag: str = "--template") -> tuple[str, Path | None]:
    """``(template text, its file)`` for a ``--template FILE|STRING`` value: a file's contents
    (UTF-8) when ``value`` names one, else ``value`` itself (its file None).

    Raises:
        ConfigError: the file cannot be read, or ``value`` is neither a file nor a template (it
            holds no ``{{`` or ``{%``: a misspelt file name, most likely).
    """
    path = Path(value).expanduser()
    if "{{" not in value and "{%" not in value:
        if not path.is_file():
            raise ConfigError(
                f"{flag} {value!r}: no such file, and no template either (a template reads row fields "
                "with {{ field }}, e.g. '{{ instruction }}')"
            )
        try:
            return path.read_text(encoding="utf-8"), path.resolve()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{flag} {value}: cannot be read: {exc}") from None
    return value, None


def prompt_template(user: str | None, system: str | None = None) -> PromptTemplate | None:
    """The :class:`PromptTemplate` of ``--template USER`` and ``--system-template SYSTEM`` values
    (each a file or a template string, :func:`load_template`); None when neither is given.

    Raises:
        ConfigError: ``system`` without ``user``, or a value :func:`load_template` or
            :class:`PromptTemplate` refuses.
    """
    if user is None:
        if system is not None:
            raise ConfigError("--system-template needs --template (the user message's template)")
        return None
    user_text, user_file = load_template(user)
    system_text, system_file = (
        load_template(system, "--system-template") if system is not None else (None, None)
    )
    return PromptTemplate(user_text, system_text, files=(user_file, system_file))


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """The user message's template and, optionally, the system message's (Jinja2 source text).

    Attributes:
        user: renders the user message; an empty result makes the row a bad row.
        system: renders the system message; an empty result means no system message.
        files: the files the texts came from (``--template FILE``), None for a string, so a
            command line that runs the producer can name them (:meth:`InputMapping.argv`).

    Raises:
        ConfigError: a template is not valid Jinja2 (the message gives its line), or reads no
            field of the row at all.
    """

    user: str
    system: str | None = None
    files: tuple[Path | None, Path | None] = (None, None)
    _compiled: tuple[jinja2.Template, jinja2.Template | None] = field(init=False, repr=False, compare=False)
    _fields: tuple[_FieldPath, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        paths: list[_FieldPath] = []
        compiled: list[jinja2.Template | None] = []
        for flag, text in (("--template", self.user), ("--system-template", self.system)):
            if text is None:
                compiled.append(None)
                continue
            try:
                tree = _ENV.parse(text)
                compiled.append(_ENV.from_string(tree))
            except jinja2.TemplateSyntaxError as exc:
                raise ConfigError(f"{flag}: line {exc.lineno}: {exc.message}") from None
            roots = find_undeclared_variables(tree)
            if not roots:
                raise ConfigError(
                    f"{flag} reads no field of the row: use {{{{ field }}}}, e.g. {{{{ instruction }}}}"
                )
            paths += [p for p in _lookups(tree) if p[0] in roots]
        user, system = compiled
        assert user is not None
        object.__setattr__(self, "_compiled", (user, system))
        object.__setattr__(self, "_fields", tuple(dict.fromkeys(paths)))

    def digest(self) -> str:
        """A short hex digest of the texts (16 characters): equal for the same templates."""
        text = self.user + "\0" + (self.system if self.system is not None else "\1")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def with_files(self, folder: Path) -> PromptTemplate:
        """This template with every text that came from no file written to ``folder``
        (``template.user.j2``, ``template.system.j2``), so a command line can name it."""
        files = list(self.files)
        for i, (name, text) in enumerate((("user", self.user), ("system", self.system))):
            if text is not None and files[i] is None:
                path = folder / f"template.{name}.j2"
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                files[i] = path.resolve()
        return dataclasses.replace(self, files=(files[0], files[1]))

    def messages(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``[system?, user]`` messages rendered from ``row``'s fields.

        Raises:
            BadRow: a field is missing or printed while null (the reason names it), the user
                message renders empty, or the template fails on this row (its error).
        """
        user, system = self._compiled
        row = {key: _with_nulls_marked(value, None, key) for key, value in row.items()}
        system_text = self._render(system, row, "system") if system is not None else ""
        user_text = self._render(user, row, "user")
        if not user_text.strip():
            fail("the template rendered an empty user message")
        first = [{"role": "system", "content": system_text}] if system_text.strip() else []
        return [*first, {"role": "user", "content": user_text}]

    def _render(self, template: jinja2.Template, row: Mapping[str, Any], role: str) -> str:
        try:
            return template.render(row)
        except _Missing as exc:
            state = "null" if exc.null else "missing"
            fail(f"template field {self._where(row, exc)} is {state}; the row has {', '.join(sorted(row))}")
        except _Null:
            nulls = [_shown(p) for p in self._fields if _value(row, p) is None]
            fail(f"the {role} template prints a null field ({', '.join(nulls) or 'a computed value'})")
        except (jinja2.TemplateError, ArithmeticError, TypeError, ValueError, LookupError) as exc:
            fail(f"the {role} template fails on this row: {type(exc).__name__}: {exc}")

    def _where(self, row: Mapping[str, Any], missing: _Missing) -> str:
        """The failed lookup as a field path (``instances[0].input``), found among the template's."""
        if missing.parent is None:
            return str(missing.name)
        for root, steps in self._fields:
            value: Any = row.get(root)
            for i, (_, key) in enumerate(steps):
                if value is missing.parent and key == missing.name:
                    return _shown((root, steps[: i + 1]))
                value = _step(value, key)
        for root, value in row.items():  # e.g. an item of a list the template joins
            if value is missing.parent:
                return _shown((root, (("item", missing.name),)))
        return f"{missing.name!r} (of {shortened(missing.parent)})"


def _lookups(tree: nodes.Node) -> Iterator[_FieldPath]:
    """Every chain of constant lookups on a name in ``tree`` (``a``, ``a.b``, ``a[0].c``), in order."""
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Name)):
        steps: list[_Step] = []
        current: nodes.Node = node
        while isinstance(current, (nodes.Getattr, nodes.Getitem)):
            if isinstance(current, nodes.Getattr):
                steps.append(("attr", current.attr))
            elif isinstance(current.arg, nodes.Const):
                steps.append(("item", current.arg.value))
            else:
                break
            current = current.node
        if isinstance(current, nodes.Name):
            yield current.name, tuple(reversed(steps))


def _step(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    if isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
        return value[key]
    return None


def _value(row: Mapping[str, Any], path: _FieldPath) -> Any:
    value: Any = row.get(path[0], _ABSENT)
    for _, key in path[1]:
        value = _step(value, key) if value is not _ABSENT else _ABSENT
    return value


_ABSENT: Final = object()


def _shown(path: _FieldPath) -> str:
    root, steps = path
    return root + "".join(f".{k}" if kind == "attr" else f"[{k!r}]" for kind, k in steps)
