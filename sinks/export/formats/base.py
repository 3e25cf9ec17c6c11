"""The one interface every export format implements (:class:`Output`), and the JSON Lines base
most of them share (:class:`LineOutput`).

The export's second pass (:func:`sinks.export.dataset.export`) hands each winning record to every
requested format's :class:`Output`, once, in the order it reads them: ``completion(raw, record)``
or ``error(raw, record)``, with ``raw`` the record's JSON bytes as produced and ``record`` them
decoded. An output streams its rows into shards of at most ``per_shard`` rows (constant memory),
publishes each shard as it closes it, and lists it in :attr:`Output.written` (the manifest's
``shards`` entries: :func:`sinks.export.destination.finish_shard`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from sinks.export.destination import Destination, Shards
from streams.records import CompletionRecord, ErrorRecord

__all__ = ["REASONING_MODES", "FormatOptions", "LineOutput", "Output", "ReasoningMode"]

ReasoningMode = Literal["field", "inline", "drop"]
"""Where the chat format puts a completion's reasoning (:mod:`sinks.export.formats.chat`)."""

REASONING_MODES: Final[tuple[ReasoningMode, ...]] = ("field", "inline", "drop")


@dataclass(frozen=True)
class FormatOptions:
    """What the formats take beyond the records."""

    run_id: str = ""
    """the exported run (the Parquet files' key-value metadata)."""
    reasoning: ReasoningMode = "field"
    """the chat format's ``--reasoning``."""


class Output(ABC):
    """One format's writer over the export's second pass (module docstring).

    Args:
        dest: the export's destination.
        per_shard: rows per shard (``--shard-records``).
        options: the formats' options.
    """

    name: ClassVar[str]
    """the ``--output-format`` value."""

    def __init__(self, dest: Destination, per_shard: int, options: FormatOptions) -> None:
        self.dest = dest
        self.per_shard = per_shard
        self.options = options

    @abstractmethod
    def completion(self, raw: bytes, record: CompletionRecord) -> None:
        """Write one winning completion."""

    @abstractmethod
    def error(self, raw: bytes, record: ErrorRecord) -> None:
        """Write one winning dead letter (an id whose winner is an error)."""

    @abstractmethod
    def close(self) -> None:
        """Finish and publish the last shards."""

    @property
    @abstractmethod
    def written(self) -> list[dict[str, Any]]:
        """The manifest entries of the shards published so far."""


class LineOutput(Output):
    """A JSON Lines format: one line per record, from :meth:`completion_line` and
    :meth:`error_line` (``None``: the record has no line in this format), into shards named
    ``<stem>-NNNNN<suffix>`` (:class:`sinks.export.destination.Shards`)."""

    stems: ClassVar[tuple[str, str]]
    """the shard names' stems of completions and of errors."""
    suffix: ClassVar[str] = ".jsonl.zst"
    compress: ClassVar[bool] = True

    def __init__(self, dest: Destination, per_shard: int, options: FormatOptions) -> None:
        super().__init__(dest, per_shard, options)

        def shards(kind: str, stem: str) -> Shards:
            return Shards(
                dest, kind, per_shard, stem=stem, suffix=self.suffix, fmt=self.name, compress=self.compress
            )

        self._completions = shards("completions", self.stems[0])
        self._errors = shards("errors", self.stems[1])

    def completion_line(self, raw: bytes, record: CompletionRecord) -> bytes | None:
        """The line of a completion (JSON bytes without the newline)."""
        raise NotImplementedError

    def error_line(self, raw: bytes, record: ErrorRecord) -> bytes | None:
        """The line of a dead letter, or ``None`` when the format has none."""
        raise NotImplementedError

    def completion(self, raw: bytes, record: CompletionRecord) -> None:
        self._add(self._completions, self.completion_line, raw, record)

    def error(self, raw: bytes, record: ErrorRecord) -> None:
        self._add(self._errors, self.error_line, raw, record)

    @staticmethod
    def _add(shards: Shards, line_of: Callable[[bytes, Any], bytes | None], raw: bytes, record: Any) -> None:
        line = line_of(raw, record)
        if line is not None:
            shards.add(line)

    def close(self) -> None:
        self._completions.close()
        self._errors.close()

    @property
    def written(self) -> list[dict[str, Any]]:
        return self._completions.written + self._errors.written
