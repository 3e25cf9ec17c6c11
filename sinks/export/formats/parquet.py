"""``--output-format parquet``: typed columns, ``completions-NNNNN.parquet`` and ``errors-NNNNN.parquet``
(zstd-compressed Parquet; one :class:`pyarrow.parquet.ParquetWriter` per shard, row groups of at
most :data:`ROW_GROUP_ROWS` rows or about :data:`ROW_GROUP_BYTES` bytes of records, so memory
stays at one row group), with a dataset card (:mod:`sinks.export.formats.card`) beside them.

Schema: :data:`COMPLETION_COLUMNS`, :data:`ERROR_COLUMNS` (each field's description in its Parquet
field metadata under ``description``). Scalars typed, nested records flattened, free-form JSON
(``messages``, ``tools``, ``tool_calls``, ``params``, ``metadata_extra``) as JSON strings; why, and
which columns are null when: docs/export.md, "parquet".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Final

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from sinks.export.destination import Destination, finish_shard
from sinks.export.formats.base import FormatOptions, Output
from streams.records import CompletionRecord, ErrorRecord, PromptRecord, SourceOffset

__all__ = [
    "COMPLETION_COLUMNS",
    "COMPLETION_SCHEMA",
    "ERROR_COLUMNS",
    "ERROR_SCHEMA",
    "ROW_GROUP_BYTES",
    "ROW_GROUP_ROWS",
    "SHARD_NAME",
    "Column",
    "ParquetOutput",
    "ParquetShards",
    "completion_row",
    "error_row",
]

SHARD_NAME: Final = re.compile(r"^(completions|errors)-\d{5}\.parquet$")
ROW_GROUP_ROWS: Final = 10_000
ROW_GROUP_BYTES: Final = 32 << 20
"""bytes of records (their JSON) buffered before a row group is written."""

_json: Final = msgspec.json.Encoder()


@dataclass(frozen=True)
class Column:
    """One column: name, Arrow type, nullable, and what it means."""

    name: str
    type: pa.DataType
    description: str
    nullable: bool = False


def _nullable(columns: tuple[Column, ...], note: str) -> tuple[Column, ...]:
    """``columns`` made nullable, ``note`` added to each description."""
    return tuple(replace(c, nullable=True, description=f"{c.description}; {note}") for c in columns)


_PROMPT: Final = (
    Column("messages", pa.string(), "the prompt's messages, OpenAI chat format, as a JSON string"),
    Column("tools", pa.string(), "the prompt's OpenAI tools list as a JSON string; null without tools", True),
)
_SOURCE: Final = (
    Column("source_topic", pa.string(), "Kafka topic of the prompt this answers", True),
    Column("source_partition", pa.int64(), "its partition", True),
    Column("source_offset", pa.int64(), "its offset", True),
)
_METADATA: Final = (
    Column("metadata_source", pa.string(), "the input file or URI the prompt came from ('-' for stdin)"),
    Column("metadata_line", pa.int64(), "1-based line (or record index) of the prompt in it"),
    Column("metadata_tags", pa.list_(pa.string()), "the prompt's tags"),
    Column("metadata_extra", pa.string(), "input fields kept with the prompt (JSON object as a string)"),
)

COMPLETION_COLUMNS: Final = (
    Column("id", pa.string(), "record id: the prompt's id (the Batch API's custom_id)"),
    Column("run_id", pa.string(), "the run that generated it"),
    Column("attempt", pa.int64(), "0 for the first generation, +1 per kafkagen regenerate"),
    Column("prompt_id", pa.string(), "the input row's id: id without its #k sample suffix"),
    Column("sample", pa.int64(), "k of the prompt's --samples completions; null: its only one", True),
    *_PROMPT,
    Column("content", pa.string(), "the answer ('' when empty)"),
    Column("reasoning_content", pa.string(), "the reasoning the server separated out; null without", True),
    Column("tool_calls", pa.string(), "the model's OpenAI tool_calls as a JSON string; null without", True),
    Column("finish_reason", pa.string(), "stop, length, tool_calls, content_filter, ..."),
    Column("prompt_tokens", pa.int64(), "tokens of the prompt"),
    Column("completion_tokens", pa.int64(), "tokens generated: reasoning and answer"),
    Column("reasoning_tokens", pa.int64(), "tokens of the reasoning (part of completion_tokens)"),
    Column(
        "cached_tokens", pa.int64(), "prompt tokens served from the prefix cache; null if not reported", True
    ),
    Column("queued_s", pa.float64(), "seconds from the prompt's fetch from Kafka to its request"),
    Column("latency_s", pa.float64(), "seconds from the request to the full response"),
    Column("started_at", pa.float64(), "when the request was sent (Unix epoch seconds, UTC)"),
    Column("finished_at", pa.float64(), "when the response arrived (Unix epoch seconds, UTC)"),
    Column("server", pa.string(), "base URL of the inference server"),
    Column("model", pa.string(), "served model name as the server reported it"),
    Column("params", pa.string(), "generation parameters sent (JSON object as a string)"),
    Column(
        "quality",
        pa.list_(pa.string()),
        "quality flags raised (consumers/quality/flags.py); empty when clean",
    ),
    *_SOURCE,
    Column("consumer", pa.string(), "the consumer instance that generated it", True),
    *_METADATA,
)
ERROR_COLUMNS: Final = (
    Column("id", pa.string(), "record id: the prompt's id"),
    Column("run_id", pa.string(), "the run; null for a record the sink could not decode", True),
    Column("attempt", pa.int64(), "the attempt that failed"),
    *_nullable(_PROMPT, "null when the prompt is not in the record"),
    Column("params", pa.string(), "the prompt's generation overrides (JSON object as a string)", True),
    Column("stage", pa.string(), "where it failed: produce, generate, sink or export"),
    Column("error_type", pa.string(), "exception class or error kind, e.g. FatalRequestError"),
    Column("message", pa.string(), "what went wrong"),
    Column("status", pa.int64(), "HTTP status from the inference server, when there was one", True),
    Column("retriable", pa.bool_(), "whether the last failure was of a retriable kind (retries exhausted)"),
    Column("attempts", pa.int64(), "requests sent before giving up"),
    Column("server", pa.string(), "the inference server, when there was one", True),
    *_SOURCE,
    Column("at", pa.float64(), "when it was dead-lettered (Unix epoch seconds, UTC)"),
    Column("raw", pa.string(), "the undecodable input (UTF-8 with replacement characters); else null", True),
    *_nullable(_METADATA, "null without a prompt"),
)


def _schema(columns: tuple[Column, ...]) -> pa.Schema:
    return pa.schema(
        [
            pa.field(c.name, c.type, nullable=c.nullable, metadata={"description": c.description})
            for c in columns
        ]
    )


COMPLETION_SCHEMA: Final = _schema(COMPLETION_COLUMNS)
ERROR_SCHEMA: Final = _schema(ERROR_COLUMNS)


def _text(value: Any) -> str:
    return _json.encode(value).decode()


def _maybe_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _source(source: SourceOffset | None) -> dict[str, Any]:
    return {
        "source_topic": source.topic if source else None,
        "source_partition": source.partition if source else None,
        "source_offset": source.offset if source else None,
    }


def _metadata(prompt: PromptRecord | None) -> dict[str, Any]:
    meta = prompt.metadata if prompt else None
    return {
        "metadata_source": meta.source if meta else None,
        "metadata_line": meta.line if meta else None,
        "metadata_tags": list(meta.tags) if meta else None,
        "metadata_extra": _text(meta.extra) if meta else None,
    }


def completion_row(record: CompletionRecord) -> dict[str, Any]:
    """A completion as a row of :data:`COMPLETION_SCHEMA`."""
    u, t = record.usage, record.timings
    return {
        "id": record.id,
        "run_id": record.run_id,
        "attempt": record.attempt,
        "prompt_id": record.prompt.prompt_id,
        "sample": record.prompt.sample,
        "messages": _text(record.prompt.messages),
        "tools": _maybe_text(record.prompt.tools),
        "content": record.content,
        "reasoning_content": record.reasoning_content,
        "tool_calls": _maybe_text(record.tool_calls),
        "finish_reason": record.finish_reason,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "cached_tokens": u.cached_tokens,
        "queued_s": t.queued_s,
        "latency_s": t.latency_s,
        "started_at": t.started_at,
        "finished_at": t.finished_at,
        "server": record.server,
        "model": record.model,
        "params": _text(record.params),
        "quality": list(record.quality),
        **_source(record.source),
        "consumer": record.consumer,
        **_metadata(record.prompt),
    }


def error_row(record: ErrorRecord) -> dict[str, Any]:
    """A dead letter as a row of :data:`ERROR_SCHEMA`."""
    prompt = record.prompt
    return {
        "id": record.id,
        "run_id": record.run_id,
        "attempt": record.attempt,
        "messages": _text(prompt.messages) if prompt else None,
        "tools": _maybe_text(prompt.tools) if prompt else None,
        "params": _text(prompt.params) if prompt else None,
        "stage": record.stage,
        "error_type": record.error_type,
        "message": record.message,
        "status": record.status,
        "retriable": record.retriable,
        "attempts": record.attempts,
        "server": record.server,
        **_source(record.source),
        "at": record.at,
        "raw": record.raw,
        **_metadata(prompt),
    }


@dataclass
class ParquetShards:
    """Writes ``<kind>-NNNNN.parquet`` files of at most ``per_shard`` rows of ``schema``: one
    :class:`pyarrow.parquet.ParquetWriter` per shard, rows buffered up to a row group
    (:data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES` bytes of records).

    Raises (from :meth:`add` and :meth:`close`):
        pyarrow.ArrowInvalid, pyarrow.ArrowTypeError: a row does not fit the schema (a bug).
    """

    dest: Destination
    kind: str
    per_shard: int
    schema: pa.Schema
    metadata: dict[str, str] = field(default_factory=dict)
    """key-value metadata of each file (on top of the schema's fields)."""
    row_group_rows: int = ROW_GROUP_ROWS
    row_group_bytes: int = ROW_GROUP_BYTES
    written: list[dict[str, Any]] = field(default_factory=list)
    _writer: pq.ParquetWriter | None = None
    _name: str = ""
    _count: int = 0
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _bytes: int = 0

    def add(self, row: dict[str, Any], size: int) -> None:
        """Add one row; ``size``: bytes it stands for (its record's JSON), for the row group's budget."""
        if self._writer is None:
            self._name = f"{self.kind}-{len(self.written):05d}.parquet"
            schema = self.schema.with_metadata(self.metadata)
            self._writer = pq.ParquetWriter(str(self.dest.path(self._name)), schema, compression="zstd")
            self._count = 0
        self._rows.append(row)
        self._bytes += size
        self._count += 1
        if len(self._rows) >= self.row_group_rows or self._bytes >= self.row_group_bytes:
            self._flush()
        if self._count >= self.per_shard:
            self.close()

    def _flush(self) -> None:
        if self._rows and self._writer is not None:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._writer.schema))
        self._rows = []
        self._bytes = 0

    def close(self) -> None:
        """Write the last row group, close the shard, publish it and list it in :attr:`written`."""
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._writer = None
        self.written.append(
            finish_shard(self.dest, self._name, fmt="parquet", kind=self.kind, records=self._count)
        )


class ParquetOutput(Output):
    """``completions-NNNNN.parquet`` and ``errors-NNNNN.parquet`` (docs/export.md, "parquet");
    the card is written by the export once the manifest is known (:func:`sinks.export.formats.card.card`)."""

    name = "parquet"

    def __init__(self, dest: Destination, per_shard: int, options: FormatOptions) -> None:
        super().__init__(dest, per_shard, options)

        def meta(kind: str) -> dict[str, str]:
            return {"kafkagen": _text({"run_id": options.run_id, "kind": kind, "schema_version": 1})}

        self._completions = ParquetShards(
            dest, "completions", per_shard, COMPLETION_SCHEMA, meta("completions")
        )
        self._errors = ParquetShards(dest, "errors", per_shard, ERROR_SCHEMA, meta("errors"))

    def completion(self, raw: bytes, record: CompletionRecord) -> None:
        self._completions.add(completion_row(record), len(raw))

    def error(self, raw: bytes, record: ErrorRecord) -> None:
        self._errors.add(error_row(record), len(raw))

    def close(self) -> None:
        self._completions.close()
        self._errors.close()

    @property
    def written(self) -> list[dict[str, Any]]:
        return self._completions.written + self._errors.written
