"""The producer's resume points: one :class:`streams.records.ProgressRecord` per input, on the
compacted ``topics.producer_progress`` topic, written in the same transaction as the records.

Its key is :func:`streams.runs.naming.progress_key` (the input's identity: path, ``s3://`` URI or
stdin digest); on resume the skipped rows must hash to the stored SHA-256 at the stored offset,
and the mapping options must be the same, else :class:`InputChangedError` (exit 2). The rules:
``docs/producer.md``, "Resume points".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from streams.config import Settings
from streams.errors import InputChangedError
from streams.inputs import MappingOptions
from streams.kafka import consumer_kwargs
from streams.records import ProgressRecord, RecordDecodeError, decode
from streams.runs import naming

__all__ = [
    "ProgressStore",
    "changed_error",
    "options_fingerprint",
    "resume_note",
    "take_progress",
]


def options_fingerprint(options: MappingOptions) -> dict[str, Any]:
    """The mapping options that shape a record's content, as stored in :class:`ProgressRecord`.

    ``last_turn`` is there only when it is not ``auto``, ``template`` (a digest of its texts)
    only when given, ``samples`` only when not 1 and ``limit`` only when set, so resume points
    written before these options existed still match a run without them.
    """
    fingerprint: dict[str, Any] = {
        "format": options.format.value,
        "prompt_field": options.prompt_field,
        "id_field": options.id_field,
        "system": options.system,
        "keep_fields": list(options.keep_fields),
        "tags": list(options.tags),
    }
    if options.last_turn != "auto":
        fingerprint["last_turn"] = options.last_turn
    if options.template is not None:
        fingerprint["template"] = options.template.digest()
    if options.samples != 1:
        fingerprint["samples"] = options.samples
    if options.limit is not None:
        fingerprint["limit"] = options.limit
    return fingerprint


def resume_note(prior: ProgressRecord, options: MappingOptions, source: str, *, noun: str = "line") -> str:
    """What to tell about resuming input ``source`` from ``prior`` with ``options``: all its lines
    were published, or the line publishing continues after (``noun``: ``line``, or ``record`` for
    a JSON array or Parquet file).

    Raises:
        InputChangedError: ``prior`` was published with other mapping options (the message lists
            each option that differs, then and now).
    """
    fingerprint = options_fingerprint(options)
    if prior.options != fingerprint:
        changed = ", ".join(
            f"{k}: {prior.options.get(k)!r} then, {fingerprint.get(k)!r} now"
            for k in dict.fromkeys([*fingerprint, *prior.options])
            if prior.options.get(k) != fingerprint.get(k)
        )
        raise InputChangedError(
            f"an earlier run published {noun}s 1-{prior.line} with other mapping options ({changed}): "
            "repeat them to resume, or pass --from-scratch or another --run-id",
            source=source,
        )
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(prior.at))
    done = f"{prior.published} records, at {when}"
    if prior.done:
        return (
            f"{source}: an earlier run published all its {prior.line} {noun}s ({done}); {noun}s added "
            "since are published, the others only checked"
        )
    return (
        f"{source}: an earlier run published {noun}s 1-{prior.line} ({done}); continuing after {noun} "
        f"{prior.line} ({noun}s up to it are only checked)"
    )


def changed_error(prior: ProgressRecord, source: str, what: str, *, noun: str = "line") -> InputChangedError:
    """The error for input ``source`` whose content no longer matches ``prior``; ``what`` says how
    (``noun``: as :func:`resume_note`)."""
    return InputChangedError(
        f"changed since an earlier run of this run id published its {noun}s 1-{prior.line}: "
        f"{what}. Restore it, or pass --from-scratch to publish it all again "
        "(the records published earlier stay on the topic, so their ids would appear twice), "
        "or use another --run-id",
        source=source,
    )


def take_progress(
    latest: dict[bytes, ProgressRecord], messages: Iterable[ConsumerRecord[bytes, bytes]], prefix: bytes
) -> None:
    """Apply progress-topic ``messages`` to ``latest`` (key → the latest resume point), keeping only
    keys that start with ``prefix`` (one run's, :func:`streams.runs.naming.progress_key_prefix`): a
    tombstone drops its key; a value that does not decode (not ours, or a future schema) leaves the
    previous resume point in force."""
    for message in messages:
        if message.key is None or not message.key.startswith(prefix):
            continue
        if message.value is None:
            latest.pop(message.key, None)
            continue
        with contextlib.suppress(RecordDecodeError):
            latest[message.key] = decode(message.value, ProgressRecord)


class ProgressStore:
    """The latest :class:`ProgressRecord` of every input published to this prompts topic under this
    run id, read from the progress topic (other keys are skipped, not kept).

    Reads with ``read_committed``, so only resume points of committed transactions count. Keys
    are :func:`streams.runs.naming.progress_key`; start it before use, stop it after.
    """

    def __init__(self, settings: Settings) -> None:
        self._tp = TopicPartition(settings.topics.producer_progress, 0)
        self._prefix = naming.progress_key_prefix(settings.topics.prompts, settings.run_id)
        base = consumer_kwargs(settings.kafka, group_id=None)
        self._consumer = AIOKafkaConsumer(**base, fetch_max_wait_ms=100)
        # The high watermark (end of the log, committed or not) comes from a read_uncommitted probe.
        self._probe = AIOKafkaConsumer(**{**base, "isolation_level": "read_uncommitted"})
        self._latest: dict[bytes, ProgressRecord] = {}

    async def start(self) -> None:
        """Connect and seek to the start of the progress topic.

        Raises:
            aiokafka.errors.KafkaError: Kafka cannot be reached.
        """
        await self._consumer.start()
        await self._probe.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)

    async def stop(self) -> None:
        """Close the connections."""
        await self._consumer.stop()
        await self._probe.stop()

    def get(self, key: bytes) -> ProgressRecord | None:
        """The latest committed progress of ``key`` read so far, if any."""
        return self._latest.get(key)

    async def refresh(self, *, timeout_s: float = 120.0, echo: Callable[[str], None] = print) -> None:
        """Read every progress record committed before this call.

        Reads up to the high watermark found now; records of a transaction still open (another
        producer's, or one killed less than the 60 s transaction timeout ago) become readable only
        when it commits or aborts, so this may wait for that.

        Raises:
            KafkaError: the broker could not be asked, or the wait exceeded ``timeout_s`` seconds.
        """
        end = (await self._probe.end_offsets([self._tp]))[self._tp]
        started = time.monotonic()
        warned = False
        while await self._consumer.position(self._tp) < end:
            batch = await self._consumer.getmany(self._tp, timeout_ms=200, max_records=10000)
            take_progress(self._latest, batch.get(self._tp, []), self._prefix)
            waited = time.monotonic() - started
            if waited > 5 and not warned:
                warned = True
                echo(
                    f"waiting for an open transaction on {self._tp.topic} to end (another producer, or one "
                    "killed less than a minute ago)"
                )
            if waited > timeout_s:
                raise KafkaError(
                    f"the progress topic {self._tp.topic} did not become readable in {timeout_s} s"
                )
