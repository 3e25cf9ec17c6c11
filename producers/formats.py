"""Input formats: detect what a line of a prompt file is, and turn it into a :class:`PromptRecord`.

Pure functions: no Kafka, no file access. The producer reads lines and calls :func:`parse_line`
(or :func:`normalise` on an already decoded row); every bad row raises
:class:`streams.errors.InputError` naming ``source:line`` and the reason.

Formats (:class:`FormatName`), one JSON object per line:

``chat``
    OpenAI chat: ``{"messages": [...], "tools"?: [...], "id"?: str|int, <generation params>?}``.
    Top-level generation parameters (:class:`streams.records.GenerationParams` field names, plus
    ``max_completion_tokens`` as an alias of ``max_tokens``) become the record's overrides.
    OpenAI request parameters that ``GenerationParams`` cannot carry (``n``, ``tool_choice``,
    ``response_format``, ``frequency_penalty``, ``reasoning_effort``, ...) are rejected unless they
    hold OpenAI's default value, so no setting is dropped silently. Other top-level fields are row
    data: ignored unless named in ``keep_fields``. ``tools: null`` or ``[]`` means no tools.
``prompt``
    ``{"prompt": str, "id"?: ..., <generation params>?}``: one user message (parameters as chat).
``openai_batch``
    OpenAI Batch API request rows: ``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
    "body": {"messages", "tools"?, "max_tokens"?, "temperature"?, ...}}``. Body generation parameters
    become overrides; ``body.model`` (and ``user``, ``store``, ``metadata``, ``service_tier``) are
    ignored, because the served model answers. Any other body field is rejected rather than dropped.
    ``custom_id`` is required.
``dataset``
    Arbitrary rows; ``MappingOptions.prompt_field`` names the field holding the prompt: a string
    (one user message) or an OpenAI message list. E.g. GSM8K ``{"question", "answer"}`` with
    ``prompt_field="question", keep_fields=("answer",)``.
``mt_bench``
    MT-Bench questions ``{"question_id", "category", "turns": [str, ...], "reference"?}``.
``bfcl``
    Berkeley Function-Calling Leaderboard single-turn rows ``{"id", "question": [[message, ...]],
    "function": [{"name", "description", "parameters"}]}``.

Auto detection (:func:`detect_format`) looks at one row's fields, first match wins:
``custom_id`` and ``body`` → openai_batch; ``messages`` → chat; ``question`` and ``function`` →
bfcl; ``turns`` → mt_bench; ``prompt`` → prompt. With ``format=auto`` and a ``prompt_field`` set,
rows are ``dataset`` rows. Detection is per row; a producer that wants one format for a whole file
detects on its first row and passes ``dataclasses.replace(options, format=detected)``.

Record ids (the Kafka key; they must be stable across re-runs):

1. ``MappingOptions.id_field`` when set (the field must be present);
2. otherwise the format's id field: ``custom_id`` (openai_batch, required), ``question_id``
   (mt_bench), ``id`` (all others); strings as they are, integers as decimal strings;
3. otherwise :func:`derived_id`: ``<base name of source>:<line>``, e.g. ``test.jsonl:12`` for line 12
   of ``data/gsm8k/test.jsonl`` (``stdin:<line>`` for ``-``). Two input files with the same base
   name in one run therefore get colliding ids: give them distinct names or an id field.

MT-Bench turns: a row with N turns becomes ONE record, ``id = str(question_id)``, whose messages
hold only the first turn. Turn k > 1 must follow the model's own answer to turn k-1, which does not
exist when prompts are published; sending later turns without those answers would not be MT-Bench.
All turns, the ``category`` and ``reference`` (when present) go to ``metadata.extra`` so that a
second pass can build turn 2 from a completion alone (its ``prompt`` carries them):
``[user turn 1, assistant <completion content>, user turn 2]``.

BFCL: ``question[0]`` becomes the messages (rows with more than one turn are rejected: they need
executed function results between turns). ``function`` becomes OpenAI ``tools``; in each
``parameters`` schema, recursively, BFCL types are mapped to JSON Schema (``dict`` → ``object``,
``float`` → ``number``, ``tuple`` → ``array``, ``any`` → no ``type``). Function names are made valid
OpenAI names (``^[a-zA-Z0-9_-]{1,64}$``) by replacing every other character (e.g. the dot in
``math.factorial``) with ``_``; the renamed ones are kept in ``metadata.extra["bfcl_function_names"]``
as ``{openai name: original name}`` (the key is absent when nothing was renamed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Final, NoReturn

import msgspec

from streams.errors import ConfigError, InputError
from streams.records import GenerationParams, PromptMetadata, PromptRecord


class FormatName(StrEnum):
    """An input format name, as given to ``--format``."""

    AUTO = "auto"
    CHAT = "chat"
    PROMPT = "prompt"
    OPENAI_BATCH = "openai_batch"
    DATASET = "dataset"
    MT_BENCH = "mt_bench"
    BFCL = "bfcl"


@dataclass(frozen=True, slots=True)
class MappingOptions:
    """How rows become prompt records (the producer's ``--format``/``--prompt-field``/... flags).

    Attributes:
        format: the rows' format; ``auto`` detects it per row (see the module docstring). A plain
            string is accepted and converted.
        prompt_field: ``dataset`` rows: the field holding the prompt text or message list. Setting
            it with ``format=auto`` means ``dataset``.
        id_field: the row field holding the record id, for any format (overrides the default).
        system: a system prompt prepended to rows that have no system message.
        keep_fields: top-level row fields copied into ``metadata.extra`` under their own names
            (a field missing from a row is left out of that row's ``extra``).
        tags: copied into ``metadata.tags``.
        run_id: copied into ``PromptRecord.run_id``.

    Raises:
        ConfigError: unknown format, ``dataset`` without ``prompt_field``, ``prompt_field`` with
            another format, or an empty name or system prompt.
    """

    format: FormatName = FormatName.AUTO
    prompt_field: str | None = None
    id_field: str | None = None
    system: str | None = None
    keep_fields: tuple[str, ...] = field(default=())
    tags: tuple[str, ...] = field(default=())
    run_id: str | None = None

    def __post_init__(self) -> None:
        try:
            fmt = FormatName(self.format)
        except ValueError:
            choices = ", ".join(f.value for f in FormatName)
            raise ConfigError(f"unknown input format {self.format!r}: expected one of {choices}") from None
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "keep_fields", tuple(self.keep_fields))
        object.__setattr__(self, "tags", tuple(self.tags))
        if fmt is FormatName.DATASET and self.prompt_field is None:
            raise ConfigError("--format dataset needs --prompt-field: the row field holding the prompt")
        if self.prompt_field is not None and fmt not in (FormatName.AUTO, FormatName.DATASET):
            raise ConfigError(f"--prompt-field applies to --format dataset only, not {fmt.value}")
        for name, value in (("prompt_field", self.prompt_field), ("id_field", self.id_field)):
            if value is not None and not value:
                raise ConfigError(f"{name} is an empty string")
        if self.system is not None and not self.system.strip():
            raise ConfigError("the system prompt is empty: omit it instead")
        for name, values in (("keep_fields", self.keep_fields), ("tags", self.tags)):
            if not all(isinstance(v, str) and v for v in values):
                raise ConfigError(f"{name} must be non-empty strings, got {list(values)!r}")


class _BadRow(Exception):
    """Internal: a row is wrong; :func:`normalise` adds source and line to make an InputError."""


def _fail(reason: str) -> NoReturn:
    raise _BadRow(reason)


_ROLES: Final = ("system", "user", "assistant", "tool")
_OPENAI_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_NAME_CHAR: Final = re.compile(r"[^a-zA-Z0-9_-]")
_PARAM_FIELDS: Final = frozenset(GenerationParams.__struct_fields__)

# OpenAI request parameters GenerationParams cannot carry: accepted only at their OpenAI default
# value (None: any non-null value is rejected), so that no row silently loses a setting.
_UNSUPPORTED_PARAMS: Final[Mapping[str, object]] = {
    "n": 1,
    "stream": False,
    "logprobs": False,
    "top_logprobs": None,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": None,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "response_format": {"type": "text"},
    "reasoning_effort": None,
    "ignore_eos": False,
    "functions": None,
    "function_call": None,
}
# Batch body fields dropped on purpose: they name or bill the model, they do not shape its output.
_IGNORED_BODY_FIELDS: Final = frozenset({"model", "user", "store", "metadata", "service_tier"})
_BATCH_URL: Final = "/v1/chat/completions"

# BFCL parameter types → JSON Schema types; "any" → no type at all.
_BFCL_TYPES: Final[Mapping[str, str]] = {"dict": "object", "float": "number", "tuple": "array"}
_SCHEMA_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def derived_id(source: str, line: int) -> str:
    """The id of a row that carries none: ``<base name of source>:<line>``.

    ``source`` is a path or URI as given (``-`` means stdin and gives ``stdin:<line>``); ``line``
    is 1-based. Deterministic, so a re-run over the same file yields the same ids.
    """
    name = "stdin" if source == "-" else (PurePosixPath(source).name or source)
    return f"{name}:{line}"


def detect_format(row: Mapping[str, Any]) -> FormatName:
    """The format of one decoded row, by its fields; first match wins.

    ``custom_id`` and ``body`` → ``openai_batch``; ``messages`` → ``chat``; ``question`` and
    ``function`` → ``bfcl``; ``turns`` → ``mt_bench``; ``prompt`` → ``prompt``. ``dataset`` is
    never detected: it needs ``prompt_field``.

    Raises:
        InputError: the row matches none (no source or line: :func:`normalise` adds them); the
            message lists the row's fields and asks for ``--format`` or ``--prompt-field``.
    """
    if not isinstance(row, Mapping):
        raise InputError(f"row is {_json_type(row)}, expected a JSON object")
    if "custom_id" in row and "body" in row:
        return FormatName.OPENAI_BATCH
    if "messages" in row:
        return FormatName.CHAT
    if "question" in row and "function" in row:
        return FormatName.BFCL
    if "turns" in row:
        return FormatName.MT_BENCH
    if "prompt" in row:
        return FormatName.PROMPT
    fields = ", ".join(sorted(row)) or "none"
    text_fields = [k for k, v in row.items() if isinstance(v, str)]
    hint = f" (text fields here: {', '.join(text_fields)})" if text_fields else ""
    raise InputError(
        f"cannot tell this row's format from its fields ({fields}): pass --format "
        f"(chat, prompt, openai_batch, mt_bench, bfcl) or --prompt-field NAME for the field that "
        f"holds the prompt{hint}"
    )


def _nonempty_text(value: object, path: str) -> str:
    if not isinstance(value, str):
        _fail(f"{path} is {_json_type(value)}, expected a string")
    if not value.strip():
        _fail(f"{path} is an empty string")
    return value


def _message(value: object, path: str) -> dict[str, Any]:
    """Check one OpenAI chat message; returned unchanged (extra keys such as ``name`` kept)."""
    if not isinstance(value, dict):
        _fail(f"{path} is {_json_type(value)}, expected a message object with role and content")
    role = value.get("role")
    if role not in _ROLES:
        what = "missing" if role is None else f"{_short(role)}"
        _fail(f"{path}.role is {what}: expected one of {', '.join(_ROLES)}")
    content = value.get("content")
    tool_calls = value.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            _fail(f"{path} has tool_calls but role {role!r}: only assistant messages carry tool calls")
        if not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls):
            _fail(f"{path}.tool_calls must be an array of tool call objects")
    if content is None:
        if not (role == "assistant" and tool_calls):
            _fail(f"{path} ({role}) has no content")
    elif isinstance(content, str):
        if role in ("system", "user") and not content.strip():
            _fail(f"{path}.content is an empty string")
    elif isinstance(content, list):
        if not content:
            _fail(f"{path}.content is an empty array")
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                _fail(f"{path}.content[{i}] must be a content part object with a string type")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                _fail(f"{path}.content[{i}] is a text part without a string text")
    else:
        _fail(f"{path}.content is {_json_type(content)}, expected a string or an array of parts")
    if role == "tool" and not isinstance(value.get("tool_call_id"), str):
        _fail(f"{path} is a tool message without a string tool_call_id")
    return value


def _messages(value: object, path: str) -> list[dict[str, Any]]:
    if value is None:
        _fail(f"{path} is missing")
    if not isinstance(value, list):
        _fail(f"{path} is {_json_type(value)}, expected an array of messages")
    if not value:
        _fail(f"{path} is empty: at least one message is needed")
    messages = [_message(m, f"{path}[{i}]") for i, m in enumerate(value)]
    if all(m["role"] == "system" for m in messages):
        _fail(f"{path} holds only system messages: there is nothing to answer")
    return messages


def _tools(value: object, path: str) -> list[dict[str, Any]] | None:
    """Check an OpenAI ``tools`` list; ``null`` and ``[]`` mean no tools."""
    if value is None:
        return None
    if not isinstance(value, list):
        _fail(f"{path} is {_json_type(value)}, expected an array of tools")
    names: set[str] = set()
    for i, tool in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(tool, dict):
            _fail(f"{where} is {_json_type(tool)}, expected a tool object")
        if tool.get("type") != "function":
            _fail(f"{where}.type is {_short(tool.get('type'))}: only 'function' tools are supported")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            _fail(f"{where}.function is {_json_type(fn)}, expected an object with name and parameters")
        name = _nonempty_text(fn.get("name"), f"{where}.function.name")
        if name in names:
            _fail(f"{where}.function.name {name!r} is given twice")
        names.add(name)
        if "description" in fn and not isinstance(fn["description"], str):
            _fail(f"{where}.function.description is {_json_type(fn['description'])}, expected a string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            _fail(f"{where}.function.parameters is {_json_type(fn['parameters'])}, expected a JSON Schema")
    return value or None


def _params(src: Mapping[str, Any], prefix: str, *, strict: bool) -> GenerationParams:
    """Generation overrides from a chat row (``prefix=""``) or a batch body (``prefix="body."``).

    ``strict``: reject fields that are neither a message, tools nor a parameter (batch bodies).
    """
    for key, default in _UNSUPPORTED_PARAMS.items():
        if src.get(key) is not None and src[key] != default:
            _fail(f"{prefix}{key} = {_short(src[key])} is not supported by kafkagen; remove it")
    if strict:
        known = _PARAM_FIELDS | _IGNORED_BODY_FIELDS | _UNSUPPORTED_PARAMS.keys()
        unknown = sorted(set(src) - known - {"messages", "tools", "max_completion_tokens"})
        if unknown:
            _fail(f"unsupported request field(s) {', '.join(prefix + k for k in unknown)}; remove them")
    values = {k: src[k] for k in _PARAM_FIELDS if src.get(k) is not None}
    alias = src.get("max_completion_tokens")
    if alias is not None:
        if not isinstance(alias, int) or isinstance(alias, bool):
            _fail(f"{prefix}max_completion_tokens is {_short(alias)}, expected an integer")
        if "max_tokens" in values and values["max_tokens"] != alias:
            _fail(f"{prefix}max_tokens and {prefix}max_completion_tokens disagree: give one of them")
        values["max_tokens"] = alias
    if isinstance(values.get("stop"), str):
        values["stop"] = [values["stop"]]
    try:
        params = msgspec.convert(values, GenerationParams)
    except msgspec.ValidationError as exc:
        _fail(f"invalid generation parameter: {str(exc).replace('`$.', f'`{prefix}')}")
    _check_range(params, prefix)
    return params


def _check_range(p: GenerationParams, prefix: str) -> None:
    checks: list[tuple[str, object, bool, str]] = [
        ("max_tokens", p.max_tokens, p.max_tokens is not None and p.max_tokens < 1, "at least 1"),
        ("min_tokens", p.min_tokens, p.min_tokens is not None and p.min_tokens < 0, "at least 0"),
        ("temperature", p.temperature, p.temperature is not None and p.temperature < 0, "at least 0"),
        ("top_p", p.top_p, p.top_p is not None and not 0 < p.top_p <= 1, "in (0, 1]"),
        ("min_p", p.min_p, p.min_p is not None and not 0 <= p.min_p <= 1, "in [0, 1]"),
    ]
    for name, value, bad, expected in checks:
        if bad:
            _fail(f"{prefix}{name} = {value!r} is out of range: must be {expected}")


def _row_id(row: Mapping[str, Any], key: str, *, required: bool, source: str, line: int) -> str:
    value = row.get(key)
    if value is None:
        if required:
            _fail(f"id field {key!r} is missing")
        return derived_id(source, line)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    _fail(f"id field {key!r} is {_short(value)}: expected a non-empty string or an integer")


def _bfcl_type(value: object, path: str) -> str | list[str] | None:
    given: list[object] = value if isinstance(value, list) else [value]
    names = [n for n in given if isinstance(n, str)]
    if not names or len(names) != len(given):
        _fail(f"{path}.type is {_short(value)}: expected a type name or an array of them")
    if "any" in names:
        return None
    mapped = [_BFCL_TYPES.get(n, n) for n in names]
    for original, new in zip(names, mapped, strict=True):
        if new not in _SCHEMA_TYPES:
            _fail(f"{path}.type {original!r} is not a JSON Schema or BFCL type")
    return mapped if isinstance(value, list) else mapped[0]


def _bfcl_schema(node: object, path: str) -> dict[str, Any]:
    """A copy of a BFCL parameter schema with BFCL types mapped to JSON Schema, recursively."""
    if not isinstance(node, dict):
        _fail(f"{path} is {_json_type(node)}, expected a JSON Schema object")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            mapped = _bfcl_type(value, path)
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties":
            if not isinstance(value, dict):
                _fail(f"{path}.properties is {_json_type(value)}, expected an object")
            out[key] = {n: _bfcl_schema(s, f"{path}.properties.{n}") for n, s in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _bfcl_schema(value, f"{path}.{key}")
        elif key in ("items", "prefixItems", "anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [_bfcl_schema(s, f"{path}.{key}[{i}]") for i, s in enumerate(value)]
        else:
            out[key] = value
    return out


def _bfcl_tools(value: object) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """OpenAI tools from a BFCL ``function`` list, and ``{openai name: original}`` of renamed ones."""
    if not isinstance(value, list) or not value:
        _fail(f"function is {_json_type(value)}, expected a non-empty array of function definitions")
    tools: list[dict[str, Any]] = []
    renamed: dict[str, str] = {}
    seen: set[str] = set()
    for i, fn in enumerate(value):
        path = f"function[{i}]"
        if not isinstance(fn, dict):
            _fail(f"{path} is {_json_type(fn)}, expected a function definition object")
        original = _nonempty_text(fn.get("name"), f"{path}.name")
        name = _NOT_NAME_CHAR.sub("_", original)
        if not _OPENAI_NAME.fullmatch(name):
            _fail(f"{path}.name {original!r} cannot be made a valid OpenAI function name (1-64 chars)")
        if name in seen:
            _fail(f"{path}.name {original!r} becomes {name!r}, which another function already uses")
        seen.add(name)
        if name != original:
            renamed[name] = original
        description = fn.get("description", "")
        if not isinstance(description, str):
            _fail(f"{path}.description is {_json_type(description)}, expected a string")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        schema = _bfcl_schema(params, f"{path}.parameters")
        function = {"name": name, "description": description, "parameters": schema}
        tools.append({"type": "function", "function": function})
    return tools, renamed


def _mapped(
    row: dict[str, Any], fmt: FormatName, options: MappingOptions
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, GenerationParams, dict[str, Any]]:
    """(messages, tools, params, format-specific extra) for one row of a known format."""
    no_params = GenerationParams()
    if fmt is FormatName.CHAT:
        messages = _messages(row.get("messages"), "messages")
        return messages, _tools(row.get("tools"), "tools"), _params(row, "", strict=False), {}
    if fmt is FormatName.PROMPT:
        prompt = _nonempty_text(row.get("prompt"), "prompt")
        return [{"role": "user", "content": prompt}], None, _params(row, "", strict=False), {}
    if fmt is FormatName.OPENAI_BATCH:
        for key, expected in (("method", "POST"), ("url", _BATCH_URL)):
            if key in row and row[key] != expected:
                _fail(f"{key} is {_short(row[key])}: only POST {_BATCH_URL} requests are supported")
        body = row.get("body")
        if not isinstance(body, dict):
            _fail(f"body is {_json_type(body)}, expected the request object")
        messages = _messages(body.get("messages"), "body.messages")
        return messages, _tools(body.get("tools"), "body.tools"), _params(body, "body.", strict=True), {}
    if fmt is FormatName.DATASET:
        name = options.prompt_field
        assert name is not None  # MappingOptions guarantees it for dataset
        if name not in row:
            _fail(f"prompt field {name!r} is missing; the row has {', '.join(sorted(row)) or 'no fields'}")
        value = row[name]
        if isinstance(value, list):
            return _messages(value, name), None, no_params, {}
        return [{"role": "user", "content": _nonempty_text(value, name)}], None, no_params, {}
    if fmt is FormatName.MT_BENCH:
        turns = row.get("turns")
        if not isinstance(turns, list) or not turns:
            _fail(f"turns is {_json_type(turns)}, expected a non-empty array of strings")
        for i, turn in enumerate(turns):
            _nonempty_text(turn, f"turns[{i}]")
        extra: dict[str, Any] = {k: row[k] for k in ("category", "turns", "reference") if k in row}
        return [{"role": "user", "content": turns[0]}], None, no_params, extra
    if fmt is FormatName.BFCL:
        question = row.get("question")
        if not isinstance(question, list) or not question:
            _fail(f"question is {_json_type(question)}, expected [[message, ...]]")
        if len(question) != 1:
            _fail(
                f"question has {len(question)} turns: multi-turn BFCL rows are not supported (they need "
                "executed function results between turns); use single-turn categories"
            )
        messages = _messages(question[0], "question[0]")
        tools, renamed = _bfcl_tools(row.get("function"))
        return messages, tools, no_params, ({"bfcl_function_names": renamed} if renamed else {})
    _fail(f"unknown format {fmt!r}")


_ID_FIELDS: Final[Mapping[FormatName, str]] = {
    FormatName.OPENAI_BATCH: "custom_id",
    FormatName.MT_BENCH: "question_id",
}


def normalise(row: object, *, source: str, line: int, options: MappingOptions) -> PromptRecord:
    """One decoded input row → one :class:`PromptRecord` (see the module docstring for the rules).

    Args:
        row: the decoded JSON value of one line.
        source: the input file name or URI as given (``-`` for stdin); kept in ``metadata.source``
            and used for derived ids.
        line: 1-based line number of the row in ``source``.
        options: the mapping options.

    Raises:
        InputError: ``"<source>:<line>: <reason>"`` for a row that is not a JSON object, of an
            undetectable format, with a missing or mistyped field, empty ``messages``, a message
            without a valid role or content, an empty prompt, a bad tools list or function schema,
            or an invalid generation parameter. Never any other exception for bad input.
    """
    try:
        if not isinstance(row, dict):
            _fail(f"row is {_json_type(row)}, expected a JSON object")
        fmt = options.format
        if fmt is FormatName.AUTO:
            fmt = FormatName.DATASET if options.prompt_field is not None else detect_format(row)
        messages, tools, params, extra = _mapped(row, fmt, options)
        id_key = options.id_field or _ID_FIELDS.get(fmt, "id")
        required = options.id_field is not None or fmt is FormatName.OPENAI_BATCH
        record_id = _row_id(row, id_key, required=required, source=source, line=line)
    except _BadRow as exc:
        raise InputError(str(exc), source=source, line=line) from None
    except InputError as exc:
        raise InputError(exc.reason, source=source, line=line) from None
    except RecursionError:
        raise InputError("row is nested too deeply", source=source, line=line) from None
    if options.system is not None and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": options.system}, *messages]
    extra.update({k: row[k] for k in options.keep_fields if k in row})
    return PromptRecord(
        id=record_id,
        messages=messages,
        tools=tools,
        params=params,
        metadata=PromptMetadata(source=source, line=line, tags=list(options.tags), extra=extra),
        run_id=options.run_id,
    )


_UTF8_BOM: Final = b"\xef\xbb\xbf"


def parse_line(raw: bytes, *, source: str, line: int, options: MappingOptions) -> PromptRecord:
    """Decode one JSON Lines line (UTF-8 bytes, trailing newline allowed) and :func:`normalise` it.

    A leading UTF-8 byte-order mark is ignored. Callers skip blank lines themselves; here a blank
    line is an error.

    Raises:
        InputError: bytes that are not UTF-8 (the reason names the byte offset in the line), not
            JSON (msgspec's reason with its byte position), or a bad row (see :func:`normalise`).
    """
    if raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM) :]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} of the line; "
            "re-encode the file as UTF-8",
            source=source,
            line=line,
        ) from None
    if not raw.strip():
        raise InputError("blank line: expected a JSON object", source=source, line=line)
    try:
        row = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", source=source, line=line) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply", source=source, line=line) from None
    return normalise(row, source=source, line=line, options=options)


__all__ = [
    "FormatName",
    "MappingOptions",
    "derived_id",
    "detect_format",
    "normalise",
    "parse_line",
]
