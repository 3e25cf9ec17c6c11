"""Input formats: detect what a row of a prompt file is, and turn it into a :class:`PromptRecord`.

Pure functions: no Kafka, no file access. The producer and the export read rows and call
:func:`parse_line` (or :func:`normalise` on an already decoded row); every bad row raises
:class:`streams.errors.InputError` naming ``source:line`` and the reason. The formats
(:class:`FormatName`), how they are told apart, the record ids, MT-Bench turns and BFCL rows:
``docs/inputs.md``, "Row formats".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Final

import msgspec

from streams.errors import ConfigError, InputError
from streams.inputs.answers import LAST_TURN_RULES, LastTurn, split_answer
from streams.inputs.bfcl import bfcl_tools
from streams.inputs.fields import (
    BadRow,
    checked_messages,
    checked_tools,
    fail,
    generation_params,
    json_type,
    nonempty_text,
    shortened,
)
from streams.inputs.samples import MAX_SAMPLES
from streams.inputs.sharegpt import sharegpt_messages, sharegpt_tools
from streams.inputs.template import PromptTemplate
from streams.records import GenerationParams, PromptMetadata, PromptRecord

__all__ = [
    "FormatName",
    "MappingOptions",
    "derived_id",
    "detect_format",
    "normalise",
    "parse_line",
]

_BATCH_URL: Final = "/v1/chat/completions"


class FormatName(StrEnum):
    """An input format name, as given to ``--input-format``."""

    AUTO = "auto"
    CHAT = "chat"
    PROMPT = "prompt"
    OPENAI_BATCH = "openai_batch"
    DATASET = "dataset"
    MT_BENCH = "mt_bench"
    BFCL = "bfcl"
    SHAREGPT = "sharegpt"


@dataclass(frozen=True, slots=True)
class MappingOptions:
    """How rows become prompt records (the producer's ``--input-format``/``--prompt-field``/... flags).

    Attributes:
        format: the rows' format; ``auto`` detects it per row (:func:`detect_format`). A plain
            string is accepted and converted.
        prompt_field: ``dataset`` rows: the field holding the prompt text or message list. Setting
            it with ``format=auto`` means ``dataset``.
        id_field: the row field holding the record id, for any format (overrides the default).
        system: a system prompt prepended to rows that have no system message.
        keep_fields: top-level row fields copied into ``metadata.extra`` under their own names
            (a field missing from a row is left out of that row's ``extra``).
        tags: copied into ``metadata.tags``.
        run_id: copied into ``PromptRecord.run_id``.
        last_turn: what becomes of a last assistant turn: ``auto``, ``reference`` or ``keep``
            (:mod:`streams.inputs.answers`).
        template: renders each row's messages from its fields (``--template``), in place of a
            format's mapping; the row's other fields still give its id and ``keep_fields``.
        samples: completions wanted per row (``--samples``); the producer publishes each row as
            this many records (:func:`streams.inputs.samples.sampled`).
        limit: only the first this many rows of the inputs, in order, are read (``--limit``; a
            row: a non-blank line, an array element, a Parquet row, good or bad); None: all.

    Raises:
        ConfigError: unknown format or last-turn rule, ``dataset`` without ``prompt_field``,
            ``prompt_field`` with another format, or an empty name or system prompt; a
            ``template`` beside a format, ``prompt_field`` or a system template beside ``system``.
    """

    format: FormatName = FormatName.AUTO
    prompt_field: str | None = None
    id_field: str | None = None
    system: str | None = None
    keep_fields: tuple[str, ...] = field(default=())
    tags: tuple[str, ...] = field(default=())
    run_id: str | None = None
    last_turn: LastTurn = "auto"
    template: PromptTemplate | None = None
    samples: int = 1
    limit: int | None = None

    def __post_init__(self) -> None:
        try:
            fmt = FormatName(self.format)
        except ValueError:
            choices = ", ".join(f.value for f in FormatName)
            raise ConfigError(f"unknown input format {self.format!r}: expected one of {choices}") from None
        object.__setattr__(self, "format", fmt)
        if self.last_turn not in LAST_TURN_RULES:
            choices = ", ".join(LAST_TURN_RULES)
            raise ConfigError(f"unknown last-turn rule {self.last_turn!r}: expected one of {choices}")
        object.__setattr__(self, "keep_fields", tuple(self.keep_fields))
        object.__setattr__(self, "tags", tuple(self.tags))
        if fmt is FormatName.DATASET and self.prompt_field is None:
            raise ConfigError("--input-format dataset needs --prompt-field: the row field holding the prompt")
        if self.prompt_field is not None and fmt not in (FormatName.AUTO, FormatName.DATASET):
            raise ConfigError(f"--prompt-field applies to --input-format dataset only, not {fmt.value}")
        for name, value in (("prompt_field", self.prompt_field), ("id_field", self.id_field)):
            if value is not None and not value:
                raise ConfigError(f"{name} is an empty string")
        if self.system is not None and not self.system.strip():
            raise ConfigError("the system prompt is empty: omit it instead")
        if not isinstance(self.samples, int) or not 1 <= self.samples <= MAX_SAMPLES:
            raise ConfigError(f"--samples must be 1 to {MAX_SAMPLES}, not {self.samples!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ConfigError(f"--limit must be at least 1, not {self.limit!r}")
        if self.template is not None:
            if fmt is not FormatName.AUTO or self.prompt_field is not None:
                given = f"--input-format {fmt.value}" if fmt is not FormatName.AUTO else "--prompt-field"
                raise ConfigError(f"--template builds the prompt from the row's fields itself: drop {given}")
            if self.system is not None and self.template.system is not None:
                raise ConfigError("--system and --system-template are alternatives: give one")
        for name, values in (("keep_fields", self.keep_fields), ("tags", self.tags)):
            if not all(isinstance(v, str) and v for v in values):
                raise ConfigError(f"{name} must be non-empty strings, got {list(values)!r}")


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
    ``function`` → ``bfcl``; ``conversations`` → ``sharegpt``; ``turns`` → ``mt_bench``;
    ``prompt`` → ``prompt``. ``dataset`` is
    never detected: it needs ``prompt_field``.

    Raises:
        InputError: the row matches none (no source or line: :func:`normalise` adds them); the
            message lists the row's fields and asks for ``--input-format`` or ``--prompt-field``.
    """
    if not isinstance(row, Mapping):
        raise InputError(f"row is {json_type(row)}, expected a JSON object")
    if "custom_id" in row and "body" in row:
        return FormatName.OPENAI_BATCH
    if "messages" in row:
        return FormatName.CHAT
    if "question" in row and "function" in row:
        return FormatName.BFCL
    if "conversations" in row:
        return FormatName.SHAREGPT
    if "turns" in row:
        return FormatName.MT_BENCH
    if "prompt" in row:
        return FormatName.PROMPT
    fields = ", ".join(sorted(row)) or "none"
    text_fields = [k for k, v in row.items() if isinstance(v, str)]
    hint = f" (text fields here: {', '.join(text_fields)})" if text_fields else ""
    raise InputError(
        f"cannot tell this row's format from its fields ({fields}): pass --input-format "
        f"(chat, prompt, openai_batch, mt_bench, bfcl, sharegpt) or --prompt-field NAME for the field that "
        f"holds the prompt{hint}"
    )


def _row_id(row: Mapping[str, Any], key: str, *, required: bool, source: str, line: int) -> str:
    value = row.get(key)
    if value is None:
        if required:
            fail(f"id field {key!r} is missing")
        return derived_id(source, line)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    fail(f"id field {key!r} is {shortened(value)}: expected a non-empty string or an integer")


def _mapped(
    row: dict[str, Any], fmt: FormatName, options: MappingOptions
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, GenerationParams, dict[str, Any]]:
    """(messages, tools, params, format-specific extra) for one row of a known format."""
    no_params = GenerationParams()
    if fmt is FormatName.CHAT:
        messages = checked_messages(row.get("messages"), "messages")
        return (
            messages,
            checked_tools(row.get("tools"), "tools"),
            generation_params(row, "", strict=False),
            {},
        )
    if fmt is FormatName.PROMPT:
        prompt = nonempty_text(row.get("prompt"), "prompt")
        return [{"role": "user", "content": prompt}], None, generation_params(row, "", strict=False), {}
    if fmt is FormatName.OPENAI_BATCH:
        for key, expected in (("method", "POST"), ("url", _BATCH_URL)):
            if key in row and row[key] != expected:
                fail(f"{key} is {shortened(row[key])}: only POST {_BATCH_URL} requests are supported")
        body = row.get("body")
        if not isinstance(body, dict):
            fail(f"body is {json_type(body)}, expected the request object")
        messages = checked_messages(body.get("messages"), "body.messages")
        return (
            messages,
            checked_tools(body.get("tools"), "body.tools"),
            generation_params(body, "body.", strict=True),
            {},
        )
    if fmt is FormatName.DATASET:
        name = options.prompt_field
        assert name is not None  # MappingOptions guarantees it for dataset
        if name not in row:
            fail(f"prompt field {name!r} is missing; the row has {', '.join(sorted(row)) or 'no fields'}")
        value = row[name]
        if isinstance(value, list):
            return checked_messages(value, name), None, no_params, {}
        return [{"role": "user", "content": nonempty_text(value, name)}], None, no_params, {}
    if fmt is FormatName.MT_BENCH:
        turns = row.get("turns")
        if not isinstance(turns, list) or not turns:
            fail(f"turns is {json_type(turns)}, expected a non-empty array of strings")
        for i, turn in enumerate(turns):
            nonempty_text(turn, f"turns[{i}]")
        extra: dict[str, Any] = {k: row[k] for k in ("category", "turns", "reference") if k in row}
        return [{"role": "user", "content": turns[0]}], None, no_params, extra
    if fmt is FormatName.BFCL:
        question = row.get("question")
        if not isinstance(question, list) or not question:
            fail(f"question is {json_type(question)}, expected [[message, ...]]")
        if len(question) != 1:
            fail(
                f"question has {len(question)} turns: multi-turn BFCL rows are not supported (they need "
                "executed function results between turns); use single-turn categories"
            )
        messages = checked_messages(question[0], "question[0]")
        tools, renamed = bfcl_tools(row.get("function"))
        return messages, tools, no_params, ({"bfcl_function_names": renamed} if renamed else {})
    if fmt is FormatName.SHAREGPT:
        return sharegpt_messages(row), sharegpt_tools(row.get("tools")), no_params, {}
    fail(f"unknown format {fmt!r}")


_MESSAGES_PATH: Final[Mapping[FormatName, str]] = {
    FormatName.SHAREGPT: "conversations",
    FormatName.OPENAI_BATCH: "body.messages",
    FormatName.BFCL: "question[0]",
}

_ID_FIELDS: Final[Mapping[FormatName, str]] = {
    FormatName.OPENAI_BATCH: "custom_id",
    FormatName.MT_BENCH: "question_id",
}


def normalise(row: object, *, source: str, line: int, options: MappingOptions) -> PromptRecord:
    """One decoded input row → one :class:`PromptRecord` (the rules: ``docs/inputs.md``, "Row formats").

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
            fail(f"row is {json_type(row)}, expected a JSON object")
        fmt = options.format
        if options.template is not None:
            extra: dict[str, Any] = {}
            messages, tools, params = options.template.messages(row), None, GenerationParams()
        else:
            if fmt is FormatName.AUTO:
                fmt = FormatName.DATASET if options.prompt_field is not None else detect_format(row)
            messages, tools, params, extra = _mapped(row, fmt, options)
            rule = options.last_turn
            if rule == "reference" or (rule == "auto" and fmt is FormatName.SHAREGPT):
                path = options.prompt_field if fmt is FormatName.DATASET else _MESSAGES_PATH.get(fmt)
                messages, answer = split_answer(messages, path or "messages")
                extra.update(answer)
        id_key = options.id_field or _ID_FIELDS.get(fmt, "id")
        required = options.id_field is not None or fmt is FormatName.OPENAI_BATCH
        record_id = _row_id(row, id_key, required=required, source=source, line=line)
    except BadRow as exc:
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
