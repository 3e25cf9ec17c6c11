"""A run's status, read from Kafka, the control topic and the servers: ``kafkagen status``, the
main job's progress and the dashboard all use :func:`collect` (or a :class:`Collector` kept open).

:mod:`launch.status.shape` turns what is read into a :class:`RunStatus`. Nothing here writes to
Kafka, so it runs from any host that reaches it. What is read, and how: docs/status.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.metadata import MetadataRequest

from consumers.servers import ServerClient
from launch.status.shape import GroupMember, Observation, RunStatus, ServerProbe, shape
from producers.progress import take_progress
from streams.config import Settings
from streams.control import RATE_WINDOW_S, ControlLog, ControlState
from streams.kafka import ask_brokers, client_kwargs, consumer_kwargs
from streams.records import ProgressRecord
from streams.runs import naming

__all__ = ["Collector", "RunStatus", "collect", "quiet_kafka_logs"]

log = logging.getLogger("kafkagen.status")

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def quiet_kafka_logs() -> None:
    """Keep aiokafka's own log lines (coordinator discovery, ``GroupCoordinatorNotAvailableError``
    while a broker starts, ``Unable connect to ...`` while it is down) out of a terminal view: a
    status reader only reads, and its failures reach the caller as exceptions."""
    for name in ("aiokafka", "kafka"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


class _ProgressReader:
    """The latest :class:`ProgressRecord` per input of one run, read incrementally from the
    progress topic (one partition) up to its last stable offset at each :meth:`read`."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str, prefix: bytes) -> None:
        self._consumer = consumer
        self._tp = TopicPartition(topic, 0)
        self._prefix = prefix
        self._assigned = False
        self.latest: dict[bytes, ProgressRecord] = {}

    async def read(self, end: int) -> None:
        """Read up to offset ``end`` (exclusive; the read_committed end offset)."""
        if not self._assigned:
            self._consumer.assign([self._tp])
            await self._consumer.seek_to_beginning(self._tp)
            self._assigned = True
        while await self._consumer.position(self._tp) < end:
            batch = await self._consumer.getmany(self._tp, timeout_ms=200, max_records=10000)
            take_progress(self.latest, batch.get(self._tp, []), self._prefix)

    @property
    def published(self) -> int | None:
        return sum(r.published for r in self.latest.values()) if self.latest else None


def _members(group: Any, topic: str, *, decode_ours: bool) -> list[GroupMember]:
    """The members of one DescribeGroups group entry (v0-v3 tuples: error, group, state,
    protocol type, protocol, members (member id, client id, client host, metadata, assignment))."""
    members = []
    for member_id, _client_id, client_host, metadata, assignment in group[5]:
        name, partitions = member_id, {}
        if decode_ours:
            with contextlib.suppress(Exception):  # another assignor's bytes: the member id will do
                user = ConsumerProtocolMemberMetadata.decode(metadata).user_data or b""
                name = user.decode("utf-8") or member_id
            with contextlib.suppress(Exception):
                decoded = ConsumerProtocolMemberAssignment.decode(assignment)
                partitions = {t: sorted(ps) for t, ps in decoded.assignment if t == topic}
        # aiokafka reports the client's address as Kafka's InetAddress.toString(): "/127.0.0.1"
        members.append(GroupMember(name, client_host.lstrip("/"), partitions))
    return members


async def _closing(close: Awaitable[object]) -> None:
    """Await a client's ``close``/``stop``, ignoring its errors. With the broker gone, aiokafka 0.14's
    ``AIOKafkaConsumer.stop`` raises the ``CancelledError`` of its own cancelled fetch task
    (``Fetcher.close``); that one is ignored too, unless this task is being cancelled itself."""
    try:
        await close
    except (KafkaError, OSError):
        pass
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


class Collector:
    """Reads a run's status again and again over the same clients (:meth:`collect`).

    Args:
        settings: the run's (``run_id``, ``replay_of``, ``topics``, ``kafka``, ``generation``).
        servers: server URLs to list and ask even without a member report (the main job's).
        probe_servers: ask the servers themselves (False: member reports only).
        timeout_s: seconds one collection may take against Kafka (the first one: at least 60,
            as it reads the control and progress topics from their beginning).
        probe_timeout_s: seconds each server may take to answer.

    Use as ``async with Collector(settings) as c: status = await c.collect()``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        servers: Sequence[str] = (),
        probe_servers: bool = True,
        timeout_s: float = 15.0,
        probe_timeout_s: float = 2.0,
    ) -> None:
        self.settings = settings
        self.servers = [u.rstrip("/") for u in servers]
        self.probe_servers = probe_servers
        self.timeout_s = timeout_s
        self.probe_timeout_s = probe_timeout_s
        t = settings.topics
        self.generate_group = naming.generate_group(settings)
        self.sink_group = naming.sink_group(settings)
        owner = settings.replay_of or settings.run_id  # a replay publishes nothing: the original's inputs
        self._prefix = naming.progress_key_prefix(t.prompts, owner)
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._progress: _ProgressReader | None = None
        self._control: ControlLog | None = None
        # a replay reads its parent's prompts topic, which holds the parent's regenerations too
        self._parent = (
            naming.for_run(settings, settings.replay_of, replay_of=None) if settings.replay_of else None
        )
        self._parent_control: ControlLog | None = None
        self._clients: dict[str, ServerClient] = {}
        self._http: httpx.AsyncClient | None = None
        self._described: dict[str, float] = {}
        self._results: deque[tuple[float, int]] = deque()
        self._host = socket.gethostname()
        self._warm = False

    async def __aenter__(self) -> Collector:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect to Kafka.

        Raises:
            aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s``.
        """
        kafka = self.settings.kafka
        async with asyncio.timeout(self.timeout_s):
            self._admin = AIOKafkaAdminClient(
                **client_kwargs(kafka, role="status"), request_timeout_ms=int(self.timeout_s * 1000)
            )
            await self._admin.start()
            self._consumer = AIOKafkaConsumer(
                **consumer_kwargs(kafka, group_id=None), fetch_max_wait_ms=100, request_timeout_ms=10000
            )
            await self._consumer.start()
        self._progress = _ProgressReader(self._consumer, self.settings.topics.producer_progress, self._prefix)

    async def stop(self) -> None:
        """Close every client (errors while closing are ignored)."""
        for log in (self._control, self._parent_control):
            if log is not None:
                await log.stop()
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        if self._http is not None:
            await self._http.aclose()
        if self._consumer is not None:
            await _closing(self._consumer.stop())
        if self._admin is not None:
            await _closing(self._admin.close())
        self._admin = self._consumer = self._control = self._parent_control = self._http = None
        self._warm = False
        self._clients.clear()

    async def _partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Topic -> partition numbers for the topics that exist (no auto-creation)."""
        assert self._admin is not None
        response = await self._admin._send_request(MetadataRequest(topics, allow_auto_topic_creation=False))
        found: dict[str, list[int]] = {}
        for entry in response.to_object()["topics"]:
            if not entry.get("error_code") and entry["partitions"]:
                found[entry["topic"]] = sorted(p["partition"] for p in entry["partitions"])
        return found

    async def _committed(self, group: str, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
        assert self._admin is not None
        if not tps:
            return {}
        offsets = await self._admin.list_consumer_group_offsets(group, partitions=tps)
        return {(tp.topic, tp.partition): max(0, o.offset) for tp, o in offsets.items()}

    async def _groups(self) -> tuple[list[GroupMember], int]:
        """The generation group's members and the sink group's member count. One group per
        DescribeGroups request: aiokafka 0.14 fails to decode a response describing two groups
        ("Buffer underrun decoding string", with Kafka 4.1)."""
        assert self._admin is not None
        generate: list[GroupMember] = []
        sink = 0
        for name in (self.generate_group, self.sink_group):
            for response in await self._admin.describe_consumer_groups([name]):
                for group in response.groups:
                    if group[0]:
                        raise for_code(group[0])(f"DescribeGroups {group[1]}")
                    if group[1] == self.generate_group:
                        generate = _members(group, self.settings.topics.prompts, decode_ours=True)
                    elif group[1] == self.sink_group:
                        sink = len(group[5])
        return generate, sink

    async def _read_control(self, exists: bool) -> ControlState:
        if not exists:
            return ControlState()
        self._control = await self._read_log(self._control, self.settings)
        return self._control.state

    async def _parent_regenerated(self, found: dict[str, list[int]]) -> int:
        """Prompts the parent of a replay re-published (``kafkagen regenerate``) into the prompts
        topic the replay reads (0 for a run that is no replay, or whose parent has no control topic)."""
        parent = self._parent
        if parent is None or parent.topics.control not in found:
            return 0
        self._parent_control = await self._read_log(self._parent_control, parent)
        return sum(r.ids for r in self._parent_control.state.regenerations.values())

    async def _read_log(self, control: ControlLog | None, settings: Settings) -> ControlLog:
        """``control``, run ``settings.run_id``'s read-only :class:`ControlLog`, read on to its
        topic's end now (5 s at most); started and read whole when None."""
        if control is None:
            control = ControlLog(settings, write=False)
            try:
                await control.start(timeout_s=self.timeout_s)
            except BaseException:
                await control.stop()
                raise
            return control
        assert self._consumer is not None
        tp = TopicPartition(settings.topics.control, 0)
        end = (await self._consumer.end_offsets([tp]))[tp]
        deadline = time.monotonic() + 5.0
        while control.state.offset < end and time.monotonic() < deadline:
            if not await control.poll(timeout_ms=200):
                break  # nothing more to read now (records compacted away or not yet fetched)
        return control

    def _askable(self, url: str, host: str | None) -> bool:
        """Whether ``url`` means the same server from here as for a consumer on ``host``."""
        name = urlsplit(url).hostname or ""
        return host is None or host == self._host or name not in _LOOPBACK

    async def _probe(self, url: str) -> ServerProbe:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = ServerClient(url, self.settings.generation, pool_size=1)
        now = time.monotonic()
        answered = False
        if client.info is None and now - self._described.get(url, -1e9) > 30.0:
            self._described[url] = now
            with contextlib.suppress(Exception):  # unreachable or not a server: asked again in 30 s
                await asyncio.wait_for(client.describe(wait_s=self.probe_timeout_s), self.probe_timeout_s)
                answered = True
        load = None
        with contextlib.suppress(Exception):
            load = await asyncio.wait_for(client.load(), self.probe_timeout_s)
        up = answered or load is not None or await self._answers(url)
        info = client.info
        return ServerProbe(
            url=url,
            up=up,
            model=info.model if info else None,
            slots=info.max_running_requests if info else None,
            running=load.running if load else None,
            queued=load.queued if load else None,
        )

    async def _answers(self, url: str) -> bool:
        """Does the server answer HTTP at all (one without ``/metrics``: llama.cpp without
        ``--metrics``, SGLang without ``--enable-metrics``)? Any status counts."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.probe_timeout_s)
        try:
            await self._http.get(url + "/v1/models")
        except httpx.HTTPError:
            return False
        return True

    async def _probes(self, control: ControlState) -> dict[str, ServerProbe]:
        if not self.probe_servers:
            return {}
        urls: dict[str, str | None] = {u: None for u in self.servers}
        for report in control.members.values():
            if report.state != "stopped":
                urls[report.server.rstrip("/")] = report.host
        ask = [u for u, host in urls.items() if self._askable(u, host)]
        probes = await asyncio.gather(*(self._probe(u) for u in ask))
        return {p.url: p for p in probes}

    def _observed_rate(self, results: int) -> tuple[float | None, float]:
        """Results per second between the collections of the last :data:`RATE_WINDOW_S` seconds
        (None over less than 2 s), and the seconds it was measured over."""
        now = time.monotonic()
        self._results.append((now, results))
        while self._results and now - self._results[0][0] > RATE_WINDOW_S:
            self._results.popleft()
        first_t, first_n = self._results[0]
        span = now - first_t
        return ((results - first_n) / span if span >= 2.0 else None), span

    async def collect(self) -> RunStatus:
        """The run's status now.

        Raises:
            aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s``.
        """
        if self._admin is None:
            await self.start()
        assert self._consumer is not None and self._progress is not None
        t = self.settings.topics
        at = time.time()
        # The first collection reads the control and progress topics whole: give it more time.
        async with asyncio.timeout(self.timeout_s if self._warm else max(60.0, self.timeout_s)):
            parent_control = [self._parent.topics.control] if self._parent is not None else []
            found = await self._partitions(
                [t.prompts, t.completions, t.errors, t.control, t.producer_progress, *parent_control]
            )
            prompt_tps = [TopicPartition(t.prompts, p) for p in found.get(t.prompts, [])]
            result_tps = [TopicPartition(x, p) for x in (t.completions, t.errors) for p in found.get(x, [])]
            tps = prompt_tps + result_tps
            ends = await self._consumer.end_offsets(tps) if tps else {}
            generated: dict[tuple[str, int], int] = {}
            in_s3: dict[tuple[str, int], int] = {}
            members: list[GroupMember] = []
            sink_members = 0
            if tps:  # a run that does not exist has no groups to ask about
                generated = await ask_brokers(
                    "generated offsets",
                    lambda: self._committed(self.generate_group, prompt_tps),
                    timeout_s=None,
                )
                in_s3 = await ask_brokers(
                    "sink offsets", lambda: self._committed(self.sink_group, result_tps), timeout_s=None
                )
                members, sink_members = await ask_brokers("consumer groups", self._groups, timeout_s=None)
            published = None
            if t.producer_progress in found:
                ptp = TopicPartition(t.producer_progress, 0)
                await self._progress.read((await self._consumer.end_offsets([ptp]))[ptp])
                published = self._progress.published
            control = await self._read_control(t.control in found)
            parent_regenerated = await self._parent_regenerated(found)
        self._warm = True
        probes = await self._probes(control)

        def by_partition(topic: str) -> dict[int, int]:
            return {tp.partition: o for tp, o in ends.items() if tp.topic == topic}

        completions_end, errors_end = by_partition(t.completions), by_partition(t.errors)
        interval = self.settings.gate.report_interval_s
        observed_rate, observed_span_s = self._observed_rate(
            sum(completions_end.values()) + sum(errors_end.values())
        )
        observation = Observation(
            run_id=self.settings.run_id,
            at=at,
            prompts_topic_exists=t.prompts in found,
            completions_topic_exists=t.completions in found,
            prompts_end=by_partition(t.prompts),
            generate_committed={p: o for (_, p), o in generated.items()},
            completions_end=completions_end,
            errors_end=errors_end,
            sink_committed=in_s3,
            completions_topic=t.completions,
            errors_topic=t.errors,
            prompts_topic=t.prompts,
            published=published,
            parent_regenerated=parent_regenerated,
            generate_members=members,
            sink_members=sink_members,
            control=control,
            probes=probes,
            extra_servers=self.servers,
            report_stale_s=max(10.0, 5 * interval),
            observed_rate=observed_rate,
            observed_span_s=observed_span_s,
        )
        return shape(observation)


async def collect(settings: Settings, *, servers: Sequence[str] = (), timeout_s: float = 15.0) -> RunStatus:
    """The run's status now, read once (:class:`Collector`; the schema: docs/status.md).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    async with Collector(settings, servers=servers, timeout_s=timeout_s) as collector:
        return await collector.collect()
