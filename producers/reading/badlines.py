"""Bad lines: the lines the producer does not publish, each printed on stderr (the first 20, then a
count) and written to the bad-lines report (``--bad-lines``, default ``./bad-lines.jsonl``, created,
and truncated, only when a line is bad) as ``{"file", "line", "id"?, "reason"}``. What makes a
line bad: ``docs/producer.md``, "Bad lines".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

import msgspec

from streams.inputs import MappingOptions

__all__ = ["SHOWN_BAD_LINES", "BadLineReport", "ReportRow", "bad_line_text", "id_of_bad_row"]

SHOWN_BAD_LINES: Final = 20
"""Bad lines printed on stderr; the rest are counted."""


class ReportRow(msgspec.Struct, omit_defaults=True):
    """One row of the bad-lines report (JSON ``{"file", "line", "id"?, "reason"}``)."""

    file: str
    line: int
    reason: str
    id: str | None = None


def bad_line_text(source: str, line: int, reason: str) -> str:
    """How a bad line is told on the terminal: ``bad line a.jsonl:3: <reason>`` (``line``: 1-based,
    ``reason``: :class:`producers.reading.maker.Rejected`'s, which names the fields found and the
    option that maps them when a row's format is unknown)."""
    return f"bad line {source}:{line}: {reason}"


class BadLineReport:
    """Reports bad lines: on stderr (the first ``shown`` of them) and as JSONL rows in ``path``.

    The report file is created (truncated) at the first bad line only.

    Args:
        path: the report file (JSON Lines of :class:`ReportRow`).
        echo: prints one message line (on stderr).
        shown: how many bad lines are printed; the others are only counted and written.
    """

    def __init__(self, path: Path, *, echo: Callable[[str], None], shown: int = SHOWN_BAD_LINES) -> None:
        self.path = path
        self.count = 0
        self._echo = echo
        self._shown = shown
        self._file: IO[bytes] | None = None
        self._encoder = msgspec.json.Encoder()

    def add(self, source: str, line: int, reason: str, record_id: str | None = None) -> None:
        """Report ``source:line`` as bad for ``reason`` (``record_id`` when it is known).

        Raises:
            OSError: the report file cannot be created or written.
        """
        self.count += 1
        if self.count <= self._shown:
            self._echo(bad_line_text(source, line, reason))
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(self._encoder.encode(ReportRow(source, line, reason, record_id)) + b"\n")

    def close(self) -> None:
        """Flush and close the report; print how many bad lines were not shown."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.count > self._shown:
            self._echo(f"... and {self.count - self._shown} more bad lines")
        if self.count:
            self._echo(f"bad-lines report: {self.path} ({self.count} rows)")


def id_of_bad_row(raw: bytes, options: MappingOptions) -> str | None:
    """The id of a row that failed to normalise, when its JSON names one (for the report)."""
    try:
        row = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    for name in (options.id_field, "custom_id", "question_id", "id"):
        value = row.get(name) if name else None
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return None
