"""Publishing inputs to the prompts topic exactly once, across crashes.

Each input is published by a transactional producer (``transactional_id``:
:func:`streams.runs.naming.transactional_id`, stable per input), in transactions of at most
``producer.checkpoint_every`` records or ``checkpoint_interval_s`` seconds, each committing the
records with the input's resume point (:mod:`producers.progress`). Batches are built here, one per
partition, sent when full or :data:`LINGER_S` old. The protocol, what a SIGKILL leaves and why
each record is committed once: ``docs/producer.md``, "Exactly once".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation
from tqdm import tqdm

from producers.metrics import ProducerMetrics
from producers.ownership import check_topic_owner
from producers.progress import (
    ProgressStore,
    changed_error,
    options_fingerprint,
    resume_note,
)
from producers.reading.badlines import BadLineReport
from producers.reading.ids import IdIndex, pack_where, unpack_where
from producers.reading.limits import line_limit, record_limit
from producers.reading.maker import Made, RecordMaker, Rejected
from producers.reading.reader import Chunk, InputReader
from producers.results import InputStats, RunResult
from producers.transactions import failed_transaction, transaction_failure
from streams.config import Settings
from streams.errors import InputChangedError
from streams.inputs import InputSpec, MappingOptions
from streams.kafka import producer_kwargs
from streams.records import ProgressRecord, encode
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["LINGER_S", "InputPublisher", "PublishContext", "publish"]

LINGER_S: Final = 0.2
"""Seconds a partition's partly filled batch may wait in this process before it is sent anyway."""


@dataclass
class PublishContext:
    """Everything the inputs of one invocation share."""

    settings: Settings
    options: MappingOptions
    partitions: int
    record_limit: int
    line_limit: int
    store: ProgressStore
    index: IdIndex
    report: BadLineReport
    echo: Callable[[str], None]
    s3: Callable[[], S3Client]
    from_scratch: bool
    progress_bar: bool
    inputs: list[InputSpec]
    metrics: ProducerMetrics | None = None
    rows_left: int | None = None
    """rows the inputs may still give (``--limit``; None: no limit), counted as they are read."""


class InputPublisher:
    """Publishes one input in transactions (the protocol: ``docs/producer.md``, "Exactly once")."""

    def __init__(self, ctx: PublishContext, spec: InputSpec, file_index: int) -> None:
        self.ctx = ctx
        self.spec = spec
        self.file_index = file_index
        self.stats = InputStats(spec.name)
        if ctx.metrics is not None:
            ctx.metrics.inputs.append(self.stats)
        settings = ctx.settings
        self.topic = settings.topics.prompts
        self.progress_topic = settings.topics.producer_progress
        self.key_by = settings.producer.key_by
        self.checkpoint_every = settings.producer.checkpoint_every
        self.checkpoint_interval_s = settings.producer.checkpoint_interval_s
        self.max_rate = settings.producer.max_records_per_s
        self.hasher = hashlib.sha256()
        self.line = 0
        self.offset = 0
        self.builders: dict[int, Any] = {}
        self.unsent_since: float | None = None
        self.txn_futures: list[asyncio.Future[Any]] = []
        self.txn_open = False
        self.txn_started = 0.0
        self.txn_records = 0
        self.txn_partitions: dict[int, int] = {}
        """records sent per partition in the open transaction (for the metrics)."""
        self.committed_line = 0
        self.producer: Any = None
        self.pkey = b""
        self.identity = ""
        self.prior: ProgressRecord | None = None
        self.noun = "line"
        """what the input's rows are called in messages: ``line`` (JSON Lines) or ``record``."""

    async def run(self) -> InputStats:
        """Publish the input (resuming after its stored resume point); returns what happened.

        Raises:
            InputError, KafkaError, TimeoutError, ProducerFenced: as :func:`publish`; the open
                transaction is aborted first.
        """
        ctx = self.ctx
        started = time.monotonic()
        make = RecordMaker(
            self.spec.name,
            ctx.options,
            partitions=ctx.partitions,
            key_by=self.key_by,
            record_limit=ctx.record_limit,
        )
        reader = InputReader(self.spec, make, line_limit=ctx.line_limit, s3=ctx.s3)
        bar: tqdm[Any] | None = None
        try:
            opened = await reader.open()
            self.identity = opened.identity
            self.noun = "line" if opened.container == "jsonl" else "record"
            self.pkey = naming.progress_key(self.topic, ctx.settings.run_id, self.identity)
            kwargs = producer_kwargs(ctx.settings.kafka)
            self.producer = AIOKafkaProducer(
                **{
                    **kwargs,
                    "transactional_id": naming.transactional_id(
                        self.topic, ctx.settings.run_id, self.identity
                    ),
                    "transaction_timeout_ms": ctx.settings.producer.transaction_timeout_ms,
                    "max_batch_size": min(kwargs["max_batch_size"], ctx.record_limit),
                }
            )
            # Starting the producer (InitProducerId) fences any earlier producer of this input and
            # aborts its open transaction; only then is the stored progress final.
            await self.producer.start()
            await ctx.store.refresh(echo=ctx.echo)
            self.prior = None if ctx.from_scratch else ctx.store.get(self.pkey)
            self._check_prior()
            bar = tqdm(
                total=self.spec.size,
                desc=self.spec.name if len(self.spec.name) <= 40 else "..." + self.spec.name[-37:],
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=sys.stderr,
                disable=None if ctx.progress_bar else True,
                dynamic_ncols=True,
            )
            await self._publish(reader, bar)
        finally:
            reader.close()
            if bar is not None:
                bar.close()
            if self.producer is not None:
                if self.txn_open:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self.producer.abort_transaction(), 10)
                await self.producer.stop()
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def _check_prior(self) -> None:
        if self.prior is not None:
            self.ctx.echo(resume_note(self.prior, self.ctx.options, self.spec.name, noun=self.noun))

    def _changed(self, what: str) -> InputChangedError:
        assert self.prior is not None
        return changed_error(self.prior, self.spec.name, what, noun=self.noun)

    async def _publish(self, reader: InputReader, bar: tqdm[Any]) -> None:
        ctx = self.ctx
        stats = self.stats
        name = self.spec.name
        index = ctx.index
        report = ctx.report
        hasher_update = self.hasher.update
        resume_line = self.prior.line if self.prior is not None else 0
        file_base = pack_where(self.file_index, 0)
        raw_seen = 0
        rate_started = time.monotonic()
        while True:
            chunk = await self._next_chunk(reader)
            long_lines = chunk.long_lines
            limited = False
            for i, (raw, parsed) in enumerate(zip(chunk.lines, chunk.parsed, strict=True)):
                if parsed is not None and ctx.rows_left is not None:
                    if ctx.rows_left == 0:  # --limit: this row and the rest are not the run's
                        limited = True
                        break
                    ctx.rows_left -= 1
                self.line += 1
                line = self.line
                hasher_update(raw)
                self.offset += long_lines[i] if long_lines and i in long_lines else len(raw)
                if line == resume_line:
                    self._verify_resume_point()
                if parsed is None:
                    stats.blank += 1
                    continue
                if type(parsed) is Rejected:
                    report.add(name, line, parsed.reason, parsed.record_id)
                    stats.bad += 1
                    continue
                made = parsed if type(parsed) is list else [cast(Made, parsed)]
                record_id = made[0][0]  # a line's samples share its prompt id: the first stands for all
                first = index.add(record_id, file_base | line)
                if first is not None:
                    first_file, first_line = unpack_where(first)
                    where = f"line {first_line}"
                    if first_file != self.file_index:
                        where = f"{ctx.inputs[first_file].name}:{first_line}"
                    report.add(name, line, f"duplicate id, first seen at {where}", record_id)
                    stats.bad += 1
                    continue
                if line <= resume_line:
                    stats.skipped += len(made)
                    continue
                for _, key, value, partition in made:  # all of a line's samples before a checkpoint
                    await self._append(partition, key, value)
                stats.published += len(made)
                self.txn_records += len(made)
                if self.txn_records >= self.checkpoint_every or self._txn_due():
                    await self._checkpoint(done=False)
                if self.max_rate is not None:
                    ahead = rate_started + stats.published / self.max_rate - time.monotonic()
                    if ahead > 0.05:  # sleep in steps of at least 50 ms, with what is buffered sent
                        await self._submit_all()
                        await self._rate_sleep(ahead)
            stats.lines = self.line
            stats.bytes = self.offset
            bar.update(chunk.raw_bytes - raw_seen)
            raw_seen = chunk.raw_bytes
            if chunk.eof or limited:
                break
            if self.unsent_since is not None and time.monotonic() - self.unsent_since > LINGER_S:
                await self._submit_all()
            if self.txn_open and time.monotonic() - self.txn_started > self.checkpoint_interval_s:
                await self._checkpoint(done=False)
        if limited:
            ctx.echo(
                f"{name}: --limit {ctx.options.limit} reached at {self.noun} {self.line}: not read further"
            )
        if self.line < resume_line:
            raise self._changed(f"it now has {self.line} {self.noun}s")
        if self.line > resume_line:  # also when the last line was committed mid-chunk: mark it done
            await self._checkpoint(done=True)

    def _txn_due(self) -> bool:
        """Whether the open transaction has been open ``checkpoint_interval_s``: commit it now."""
        return self.txn_open and time.monotonic() - self.txn_started >= self.checkpoint_interval_s

    async def _rate_sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` for the rate limit, committing the open transaction meanwhile when it
        reaches ``checkpoint_interval_s``: however slow the rate, no transaction stays open past it
        (below a third of ``transaction_timeout_ms``, so the broker never aborts one). Records
        up to the current line are all sent (:meth:`_submit_all`), so the resume point is exact."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.txn_open:
                due = self.txn_started + self.checkpoint_interval_s - time.monotonic()
                if due <= left:
                    await asyncio.sleep(max(due, 0.0))
                    await self._checkpoint(done=False)
                    continue
            await asyncio.sleep(left)

    def _verify_resume_point(self) -> None:
        assert self.prior is not None
        if self.offset != self.prior.offset or self.hasher.hexdigest() != self.prior.digest:
            raise self._changed(f"its first {self.line} {self.noun}s differ from the ones published")

    async def _next_chunk(self, reader: InputReader) -> Chunk:
        """The next chunk. While waiting for it, buffered records are sent once they are
        :data:`LINGER_S` old, and an open transaction is committed at ``checkpoint_interval_s``."""
        pending = asyncio.ensure_future(reader.next_chunk())
        try:
            while True:
                linger_end = None if self.unsent_since is None else self.unsent_since + LINGER_S
                txn_end = self.txn_started + self.checkpoint_interval_s if self.txn_open else None
                deadlines = [t for t in (linger_end, txn_end) if t is not None]
                timeout = max(min(deadlines) - time.monotonic(), 0) if deadlines else None
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if done:
                    return pending.result()
                if txn_end is not None and time.monotonic() >= txn_end:
                    await self._checkpoint(done=False)
                else:
                    await self._submit_all()
        finally:
            if not pending.done():
                pending.cancel()

    async def _begin(self) -> None:
        failed = failed_transaction(self.producer)
        if failed is not None:
            raise failed
        await self.producer.begin_transaction()
        self.txn_open = True
        self.txn_started = time.monotonic()

    async def _append(self, partition: int, key: bytes, value: bytes) -> None:
        builder = self.builders.get(partition)
        if builder is None:
            builder = self.builders[partition] = self.producer.create_batch()
            if self.unsent_since is None:
                self.unsent_since = time.monotonic()
        if builder.append(timestamp=None, key=key, value=value) is None:
            await self._submit(partition, builder)
            builder = self.builders[partition] = self.producer.create_batch()
            builder.append(timestamp=None, key=key, value=value)

    async def _submit(self, partition: int, builder: Any) -> None:
        if not self.txn_open:
            await self._begin()
        builder.close()
        self.txn_partitions[partition] = self.txn_partitions.get(partition, 0) + builder.record_count()
        try:
            self.txn_futures.append(await self.producer.send_batch(builder, self.topic, partition=partition))
        except IllegalOperation:
            raise transaction_failure(self.producer) from None

    async def _submit_all(self) -> None:
        builders, self.builders = self.builders, {}
        self.unsent_since = None
        for partition, builder in builders.items():
            await self._submit(partition, builder)

    async def _checkpoint(self, *, done: bool) -> None:
        """Send what is buffered and the resume point, wait for every ack, then commit.

        Raises:
            KafkaError: a record batch or the progress record was refused (the transaction is
                aborted first, so nothing of it becomes visible).
        """
        await self._submit_all()
        if not self.txn_open:
            await self._begin()
        progress = ProgressRecord(
            input=self.identity,
            source=self.spec.name,
            topic=self.topic,
            run_id=self.ctx.settings.run_id,
            line=self.line,
            offset=self.offset,
            digest=self.hasher.hexdigest(),
            published=self.stats.skipped + self.stats.published,
            done=done,
            options=options_fingerprint(self.ctx.options),
            at=time.time(),
        )
        try:
            value = encode(progress)
            ack = await self.producer.send(self.progress_topic, value=value, key=self.pkey, partition=0)
        except IllegalOperation:
            raise transaction_failure(self.producer) from None
        self.txn_futures.append(ack)
        futures, self.txn_futures = self.txn_futures, []
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            # aiokafka would commit a transaction with a failed batch in it: abort instead.
            with contextlib.suppress(Exception):
                await self.producer.abort_transaction()
            self.txn_open = False
            self.txn_partitions = {}
            raise failed[0]
        late = failed_transaction(self.producer)  # failed after the last ack arrived
        if late is not None:
            self.txn_open = False
            raise late
        await self.producer.commit_transaction()
        self.txn_open = False
        self.txn_records = 0
        if self.ctx.metrics is not None:
            self.ctx.metrics.transaction_committed(self.txn_partitions)
        self.txn_partitions = {}
        self.committed_line = self.line


async def publish(
    settings: Settings,
    options: MappingOptions,
    inputs: list[InputSpec],
    *,
    report: BadLineReport,
    from_scratch: bool = False,
    progress_bar: bool = True,
    echo: Callable[[str], None],
    s3: Callable[[], S3Client],
    metrics: ProducerMetrics | None = None,
) -> RunResult:
    """Publish ``inputs`` in order to ``settings.topics.prompts``, exactly once per run id.

    Creates the prompts and progress topics when missing. Bad lines go to ``report``. The prompts
    topic must not belong to another run (:func:`producers.ownership.check_topic_owner`).

    Args:
        options: how rows become records.
        inputs: resolved (:func:`streams.inputs.resolve_inputs`), published in this order.
        from_scratch: ignore stored resume points (publish everything again).
        progress_bar: show a progress bar per input (when stderr is a terminal).
        echo: prints one message line (on stderr).
        s3: returns the S3 client (called only for ``s3://`` inputs).
        metrics: where the counts go for ``--metrics-port`` (:mod:`producers.metrics`); None: nowhere.

    Raises:
        ForeignRunError: the prompts topic belongs to another run; nothing is published.
        InputError: an input cannot be read (a broken JSON array, an unreadable Parquet file), or
            changed since an earlier run.
        KafkaError, asyncio.TimeoutError: Kafka is unreachable or refused the records; the open
            transaction is aborted (its records never become visible).
        ProducerFenced: another producer started publishing the same input.
    """
    result = RunResult()
    started = time.monotonic()
    specs = topic_specs(settings)
    counts = await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    partitions = counts[settings.topics.prompts]
    if partitions != settings.topics.partitions:
        echo(
            f"note: topic {settings.topics.prompts} exists with {partitions} partitions "
            f"(topics.partitions is {settings.topics.partitions}): using {partitions}"
        )
    await check_topic_owner(settings)
    limit = await record_limit(settings, settings.topics.prompts)
    store = ProgressStore(settings)
    await store.start()
    ctx = PublishContext(
        settings=settings,
        options=options,
        partitions=partitions,
        record_limit=limit,
        line_limit=line_limit(settings),
        store=store,
        index=IdIndex(),
        report=report,
        echo=echo,
        s3=s3,
        from_scratch=from_scratch,
        progress_bar=progress_bar,
        inputs=inputs,
        metrics=metrics,
        rows_left=options.limit,
    )
    try:
        for file_index, spec in enumerate(inputs):
            if ctx.rows_left == 0:
                echo(f"--limit {options.limit} reached: {len(inputs) - file_index} more input(s) not read")
                break
            stats = await InputPublisher(ctx, spec, file_index).run()
            result.inputs.append(stats)
            if len(inputs) > 1:
                echo(
                    f"{spec.name}: published {stats.published}, skipped {stats.skipped}, bad {stats.bad}, "
                    f"{stats.lines} lines in {stats.seconds:.2f} s"
                )
    finally:
        await store.stop()
        result.seconds = time.monotonic() - started
    return result
