"""``--output-format jsonl`` (the default): the records as produced, zstd JSON Lines.

``completions-NNNNN.jsonl.zst``: one :class:`streams.records.CompletionRecord` per line, the bytes
as the consumer produced them; ``errors-NNNNN.jsonl.zst``: one
:class:`streams.records.ErrorRecord` per line. Lossless: every other format is made from these.
"""

from __future__ import annotations

import re
from typing import Final

from sinks.export.formats.base import LineOutput
from streams.records import CompletionRecord, ErrorRecord

__all__ = ["SHARD_NAME", "JsonlOutput"]

SHARD_NAME: Final = re.compile(r"^(completions|errors)-\d{5}\.jsonl\.zst$")


class JsonlOutput(LineOutput):
    """The records' own bytes, one per line."""

    name = "jsonl"
    stems = ("completions", "errors")

    def completion_line(self, raw: bytes, record: CompletionRecord) -> bytes:
        return raw

    def error_line(self, raw: bytes, record: ErrorRecord) -> bytes:
        return raw
