"""Making records from input lines: parse (:func:`streams.inputs.parse_line`), encode, check the
size (:mod:`producers.reading.limits`) and choose the partition (:mod:`producers.partitioning`).
"""

from __future__ import annotations

from typing import NamedTuple, cast

from producers.partitioning import input_salt, partition_for
from producers.reading.badlines import id_of_bad_row
from producers.reading.limits import record_size
from streams.config import KeyBy
from streams.errors import InputError
from streams.inputs import MappingOptions, parse_line, sampled
from streams.records import PromptRecord, encode, key_of

__all__ = ["Made", "Parsed", "RecordMaker", "Rejected"]


class Rejected(NamedTuple):
    """A line that cannot be published: why, and its record id when that is known."""

    reason: str
    record_id: str | None = None


Made = tuple[str, bytes, bytes, int]
"""A record ready to publish: ``(id, key, value, partition)`` (key and value: bytes to send)."""
Parsed = Made | list[Made] | Rejected | None
"""What one input line became: a record, its samples' records (``--samples`` over 1), a
:class:`Rejected` line, or ``None`` for a blank line."""


class RecordMaker:
    """Turns input lines into ``(id, key, value, partition)`` (or :class:`Rejected`): parsing,
    encoding, the size check and the partition. Pure, so it runs in the reader thread.

    Args:
        source: the input's name as given (``metadata.source``, derived ids).
        options: how rows become records.
        partitions: the prompts topic's partition count.
        key_by: how the partition is chosen (:mod:`producers.partitioning`).
        record_limit: bytes a record may take in a batch (:func:`producers.reading.limits.record_limit`).

    Attributes:
        salt: :func:`producers.partitioning.input_salt` of the input's identity; the reader sets it
            once the input is open, before the first line is made.
    """

    def __init__(
        self,
        source: str,
        options: MappingOptions,
        *,
        partitions: int,
        key_by: KeyBy,
        record_limit: int,
    ) -> None:
        self.source = source
        self.options = options
        self.partitions = partitions
        self.key_by: KeyBy = key_by
        self.salt = input_salt(source)  # the reader sets the input's identity once it is open
        self.record_limit = record_limit

    def __call__(self, raw: bytes, line: int) -> Made | list[Made] | Rejected:
        """Line ``line`` (1-based; ``raw``: its bytes, not blank) as a record (a list of them, one per
        sample, with ``--samples`` over 1), or why it is bad."""
        try:
            record = parse_line(raw, source=self.source, line=line, options=self.options)
        except InputError as exc:
            return Rejected(exc.reason, id_of_bad_row(raw, self.options))
        if self.options.samples == 1:
            return self._made(record, line)
        made = [self._made(sample, line) for sample in sampled(record, self.options.samples)]
        rejected = next((m for m in made if type(m) is Rejected), None)
        return rejected or cast(list[Made], made)

    def _made(self, record: PromptRecord, line: int) -> Made | Rejected:
        value = encode(record)
        key = key_of(record.id)
        size = record_size(key, value)
        if size > self.record_limit:
            return Rejected(
                f"record is {size} bytes encoded, over the prompts topic's limit of {self.record_limit} "
                "bytes (max.message.bytes)",
                record.id,
            )
        partition = partition_for(record, key, self.partitions, self.key_by, line=line, salt=self.salt)
        return record.id, key, value, partition
