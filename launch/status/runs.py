"""The runs Kafka and S3 know, read for ``kafkagen runs`` (:mod:`launch.status.runs_cli`; shaped by
:mod:`launch.status.runs_shape`).

A fixed number of requests plus a few per run; nothing is read whole except the small compacted
topics, and nothing is written to Kafka or S3: any host that reaches them sees the same runs. What
is read: docs/status.md, "kafkagen runs: what is read".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.offset import OffsetRequest

from launch.status.collect import _closing, _ProgressReader
from launch.status.runs_shape import (
    RunFacts,
    RunsListing,
    live_seconds,
    order_rows,
    parent_of,
    resolve_prompts_topic,
    runs_of_topics,
    select_runs,
    shape_run,
)
from streams.config import S3Settings, Settings
from streams.control import ControlState, decode_control
from streams.errors import StorageError
from streams.kafka import ask_brokers, client_kwargs, consumer_kwargs
from streams.runs import naming
from streams.storage import s3_client, storage_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["GROUP_REQUESTS", "collect_runs", "list_run_folders"]

log = logging.getLogger("kafkagen.runs")

GROUP_REQUESTS = 16
"""runs whose consumer groups' offsets are asked at the same time."""
STALL_S = 10.0
"""seconds a control topic may yield nothing before it is left as read (deleted meanwhile)."""
_READ_COMMITTED = 1
"""ListOffsets ``isolation_level``: the last stable offset, as a ``read_committed`` consumer sees."""


def _s3(settings: S3Settings) -> S3Client:
    """A client that gives up quickly: listing must not hang on an S3 that does not answer."""
    return s3_client(settings, connect_timeout_s=3.0, read_timeout_s=10.0, max_attempts=2)


def _base(prefix: str) -> str:
    clean = prefix.strip("/")
    return f"{clean}/" if clean else ""


def list_run_folders(settings: S3Settings) -> dict[str, str]:
    """Run id -> S3 run folder (``<prefix>/<run>/``) of every folder under ``settings.prefix`` in
    ``settings.bucket`` whose name can be a run id (:func:`streams.runs.naming.check_run_id`).

    Raises:
        streams.errors.StorageError: S3 could not be listed (a
            :class:`~streams.errors.PermanentStorageError` for a missing bucket or a refused key).
    """
    base = _base(settings.prefix)
    folders: dict[str, str] = {}
    try:
        pages = (
            _s3(settings)
            .get_paginator("list_objects_v2")
            .paginate(Bucket=settings.bucket, Prefix=base, Delimiter="/")
        )
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                folder = common.get("Prefix", "")
                run_id = folder[len(base) : -1]
                try:
                    naming.check_run_id(run_id)
                except ValueError:
                    continue
                folders[run_id] = folder
    except Exception as exc:  # botocore's ClientError, BotoCoreError (endpoint unreachable, ...)
        raise storage_error(
            exc, f"list s3://{settings.bucket}/{base}", settings.bucket, name_it=True
        ) from exc
    return folders


def _folder_first_at(settings: S3Settings, folder: str) -> float | None:
    """The earliest ``LastModified`` (Unix seconds) of the first 1000 keys under ``folder``; None
    when empty or S3 fails (the run's age is then unknown, nothing else is lost)."""
    try:
        page = _s3(settings).list_objects_v2(Bucket=settings.bucket, Prefix=folder, MaxKeys=1000)
    except Exception as exc:
        log.warning("could not list s3://%s/%s: %s", settings.bucket, folder, exc)
        return None
    times = [o["LastModified"].timestamp() for o in page.get("Contents", []) if "LastModified" in o]
    return min(times) if times else None


Leaders = dict[str, dict[int, int]]
"""topic -> partition -> the node id of its leader (-1: none now)."""


async def _topics(admin: AIOKafkaAdminClient, names: list[str] | None = None) -> Leaders:
    """Every topic of the cluster (or of ``names``) -> its partitions' leaders (one Metadata
    request; topics with an error left out)."""
    described: list[dict[str, Any]] = await admin.describe_topics(names)
    return {
        t["topic"]: {p["partition"]: p["leader"] for p in t["partitions"]}
        for t in described
        if not t.get("error_code") and t["partitions"]
    }


async def _list_offsets(
    admin: AIOKafkaAdminClient, leaders: Leaders, tps: Iterable[TopicPartition], timestamp: int
) -> dict[TopicPartition, tuple[int, int]]:
    """ListOffsets (``read_committed``) for ``timestamp`` (-1: the end, the last stable offset; 0:
    the first record) of each of ``tps``, one request per leader: partition -> (offset, the
    record's timestamp in ms, -1 for the end or an empty partition).

    A partition answered with an error (its topic deleted meanwhile, its leader moved) is asked
    once more of its leader then, and left out if it fails again (why: docs/status.md).

    Raises:
        aiokafka.errors.KafkaError: a broker did not answer.
    """
    todo = {tp: leaders.get(tp.topic, {}).get(tp.partition, -1) for tp in tps}
    found: dict[TopicPartition, tuple[int, int]] = {}
    for attempt in range(2):
        by_node: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
        for tp, node in todo.items():
            if node >= 0:
                by_node[node][tp.topic].append((tp.partition, timestamp))
        requests = [OffsetRequest(-1, _READ_COMMITTED, list(t.items())) for t in by_node.values()]
        responses = await asyncio.gather(
            *(admin._send_request(r, node) for r, node in zip(requests, by_node, strict=True))
        )
        failed: list[TopicPartition] = [tp for tp, node in todo.items() if node < 0]
        for response in responses:
            for topic, partitions in response.topics:
                for partition, error_code, ts, offset, *_ in partitions:
                    tp = TopicPartition(topic, partition)
                    if error_code:
                        failed.append(tp)
                    else:
                        found[tp] = (offset, ts)
        if not failed or attempt:
            if failed:
                log.debug("no offsets for %s (deleted or moved meanwhile): left out", failed)
            break
        fresh = await _topics(admin, sorted({tp.topic for tp in failed}))
        todo = {tp: fresh.get(tp.topic, {}).get(tp.partition, -1) for tp in failed}
    return found


async def _read_controls(
    consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient, leaders: Leaders, topics: Sequence[str]
) -> dict[str, ControlState]:
    """Each control topic (partition 0) read from its beginning to its last stable offset and
    applied to a :class:`ControlState`, as :class:`streams.control.ControlLog` does for one
    (tombstones skipped, a value that does not decode skipped with a warning). A topic that
    yields nothing for :data:`STALL_S` seconds while others do not either (deleted meanwhile) is
    left as read so far, with a warning. The caller bounds the time."""
    states = {t: ControlState() for t in topics}
    ends = await _list_offsets(admin, leaders, [TopicPartition(t, 0) for t in topics], -1)
    pending = {tp for tp, (end, _) in ends.items() if end > 0}
    if not pending:
        return states
    consumer.assign(sorted(pending))
    await consumer.seek_to_beginning(*pending)
    progress_at = time.monotonic()
    while pending:
        for tp in list(pending):  # compacted away or aborted records: the position passes them
            if await consumer.position(tp) >= ends[tp][0]:
                pending.discard(tp)
        if not pending:
            break
        if time.monotonic() - progress_at > STALL_S:
            log.warning("%s: nothing read for %.0f s (deleted?): left as read", sorted(pending), STALL_S)
            break
        batch = await consumer.getmany(*pending, timeout_ms=200, max_records=10000)
        for tp, messages in batch.items():
            progress_at = time.monotonic() if messages else progress_at
            state = states[tp.topic]
            for message in messages:
                state.offset = message.offset + 1
                if message.value is None:
                    continue
                try:
                    state.apply(decode_control(message.value))
                except msgspec.DecodeError as exc:
                    log.warning(
                        "%s offset %d: not a control record (%s): skipped", tp.topic, message.offset, exc
                    )
    return states


async def _group_offsets(admin: AIOKafkaAdminClient, group: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset ``group`` committed, for every partition it committed on
    (an OffsetFetch for all partitions: empty for a group that never committed)."""
    offsets = await ask_brokers(
        f"offsets of {group}", lambda: admin.list_consumer_group_offsets(group), timeout_s=None
    )
    return {(tp.topic, tp.partition): max(0, o.offset) for tp, o in offsets.items()}


async def _first_record_at(
    admin: AIOKafkaAdminClient, leaders: Leaders, tps: Iterable[TopicPartition]
) -> dict[str, float]:
    """Topic -> the earliest timestamp (Unix seconds) of the first record of its partitions
    (ListOffsets for timestamp 0: the first record's offset and timestamp); empty topics left out."""
    first: dict[str, float] = {}
    for tp, (offset, ts) in (await _list_offsets(admin, leaders, tps, 0)).items():
        if offset >= 0 and ts >= 0:
            first[tp.topic] = min(first.get(tp.topic, float("inf")), ts / 1000)
    return first


async def collect_runs(
    settings: Settings, patterns: Sequence[str] = (), *, with_s3: bool = True, timeout_s: float = 15.0
) -> tuple[RunsListing, StorageError | None]:
    """The runs that Kafka (``settings.kafka``) and S3 (``settings.s3``) know now, or those that
    ``patterns`` name (run ids or shell patterns, :func:`launch.status.runs_shape.select_runs`), and the
    error that kept the S3 run folders from being listed (None: listed, or ``with_s3`` False); the
    listing then holds Kafka's runs only and says why in ``s3_error``.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError, OSError: Kafka did not answer within
            ``timeout_s`` seconds (reading the control and progress topics: at least 60).
    """
    at = time.time()
    folders_task = asyncio.create_task(asyncio.to_thread(list_run_folders, settings.s3)) if with_s3 else None
    admin = AIOKafkaAdminClient(
        **client_kwargs(settings.kafka, role="runs"), request_timeout_ms=int(timeout_s * 1000)
    )
    consumer = AIOKafkaConsumer(
        **consumer_kwargs(settings.kafka, group_id=None), fetch_max_wait_ms=100, request_timeout_ms=10000
    )
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            await consumer.start()
            topics = await ask_brokers("listing topics", lambda: _topics(admin), timeout_s=None)
        folders: dict[str, str] = {}
        s3_error: StorageError | None = None
        if folders_task is not None:
            try:
                folders = await folders_task
            except StorageError as exc:
                s3_error = exc
        own = runs_of_topics(topics)
        selected, not_found = select_runs(set(own) | set(folders), patterns)
        async with asyncio.timeout(max(60.0, timeout_s)):
            facts = await _facts(settings, admin, consumer, topics, own, folders, selected)
    finally:
        if folders_task is not None and not folders_task.done():
            folders_task.cancel()  # Kafka failed first: the listing's thread ends by its own timeouts
        elif folders_task is not None and not folders_task.cancelled():
            folders_task.exception()  # retrieved: not logged as "never retrieved" when Kafka failed
        await _closing(consumer.stop())
        await _closing(admin.close())
    missing_age = [f for f in facts if not f.own_topics and f.s3_folder is not None]
    for f in missing_age:
        assert f.s3_folder is not None
        f.s3_first_at = await asyncio.to_thread(_folder_first_at, settings.s3, f.s3_folder)
    live_s = live_seconds(settings.gate.report_interval_s)
    listing = RunsListing(
        at=at,
        kafka=settings.kafka.bootstrap_servers,
        s3_bucket=settings.s3.bucket,
        s3_prefix=settings.s3.prefix,
        s3_error=str(s3_error) if s3_error is not None else None,
        runs=order_rows(shape_run(f, at=at, live_s=live_s) for f in facts),
        not_found=not_found,
        s3_listed=with_s3 and s3_error is None,
    )
    return listing, s3_error


async def _facts(
    settings: Settings,
    admin: AIOKafkaAdminClient,
    consumer: AIOKafkaConsumer,
    topics: Leaders,
    own: dict[str, set[str]],
    folders: dict[str, str],
    selected: Sequence[str],
) -> list[RunFacts]:
    """Read what :class:`RunFacts` holds for each run of ``selected`` (docs/status.md)."""
    facts = {r: RunFacts(r, frozenset(own.get(r, ())), s3_folder=folders.get(r)) for r in selected}
    with_topics = [r for r in selected if own.get(r)]
    controls = await _read_controls(
        consumer, admin, topics, [naming.control_topic(r) for r in with_topics if "control" in own[r]]
    )
    for r in with_topics:
        facts[r].control = controls.get(naming.control_topic(r), ControlState())

    limit = asyncio.Semaphore(GROUP_REQUESTS)

    async def groups(run_id: str) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        run_settings = naming.for_run(settings, run_id, replay_of=None)
        async with limit:
            generated = await _group_offsets(admin, naming.generate_group(run_settings))
            in_s3 = await _group_offsets(admin, naming.sink_group(run_settings))
        return generated, in_s3

    offsets = dict(zip(with_topics, await asyncio.gather(*(groups(r) for r in with_topics)), strict=True))

    def tps(topic: str | None) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(topics.get(topic, {}))] if topic else []

    wanted: set[TopicPartition] = set()
    owned: set[TopicPartition] = set()
    for r in with_topics:
        f = facts[r]
        generated = offsets[r][0]
        group_topics = {t for t, _ in generated}
        topic = resolve_prompts_topic(r, f.control.run, "prompts" in f.own_topics, group_topics)
        f.prompts_topic = topic if topic in topics else None
        f.generate_committed = {p: o for (t, p), o in generated.items() if t == f.prompts_topic}
        results = tps(naming.completions_topic(r)) + tps(naming.errors_topic(r))
        result_keys = {(tp.topic, tp.partition) for tp in results}
        f.sink_committed = {tp: o for tp, o in offsets[r][1].items() if tp in result_keys}
        wanted.update(tps(f.prompts_topic), results)
        owned.update(results, tps(naming.control_topic(r)))
        if "prompts" in f.own_topics:
            owned.update(tps(naming.prompts_topic(r)))
    # a replay reads its parent's prompts topic, which holds the parent's regenerations too
    parents = {r: parent_of(r, facts[r].control.run, facts[r].prompts_topic) for r in with_topics}
    unread = {naming.control_topic(p) for p in parents.values() if p is not None} - set(controls)
    if unread := unread & set(topics):
        controls.update(await _read_controls(consumer, admin, topics, sorted(unread)))
    for r, parent in parents.items():
        if parent is not None and naming.control_topic(parent) in controls:
            regenerations = controls[naming.control_topic(parent)].regenerations.values()
            facts[r].parent_regenerated = sum(g.ids for g in regenerations)
    progress = tps(settings.topics.producer_progress)[:1] if with_topics else []
    listed = await _list_offsets(admin, topics, [*wanted, *progress], -1)
    ends = {tp: offset for tp, (offset, _) in listed.items()}
    first = await _first_record_at(admin, topics, owned)
    reader = _ProgressReader(consumer, settings.topics.producer_progress, b"")
    for ptp in progress:  # one partition
        if ptp in ends:
            await reader.read(ends.pop(ptp))

    for r in with_topics:
        f = facts[r]

        def by_partition(topic: str | None) -> dict[int, int]:
            return {tp.partition: o for tp, o in ends.items() if tp.topic == topic}

        f.prompts_end = by_partition(f.prompts_topic)
        f.completions_end = by_partition(naming.completions_topic(r))
        f.errors_end = by_partition(naming.errors_topic(r))
        if f.prompts_topic is not None:
            # a replay publishes nothing: its prompts are its parent's, published under the parent
            owner = parent_of(r, f.control.run, f.prompts_topic) or r
            prefix = naming.progress_key_prefix(f.prompts_topic, owner)
            mine = [p.published for k, p in reader.latest.items() if k.startswith(prefix)]
            f.published = sum(mine) if mine else None
        own_topics = [naming.derived_topics(r)[role] for role in f.own_topics]
        starts = [first[t] for t in own_topics if t in first]
        f.first_record_at = min(starts) if starts else None
    return [facts[r] for r in selected]
