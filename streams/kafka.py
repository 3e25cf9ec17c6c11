"""The one place that turns :class:`streams.config.KafkaSettings` into aiokafka client arguments.

Every producer, consumer and admin client is built from :func:`client_kwargs`, so security
settings (SASL_SSL with SCRAM, TLS CA) and size limits are applied once. Argument names are
aiokafka's (``aiokafka.AIOKafkaProducer`` / ``AIOKafkaConsumer`` / ``AIOKafkaAdminClient``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.group import LeaveGroupRequest
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, stop_never, wait_exponential

from streams.config import KafkaSettings
from streams.errors import UnavailableError

__all__ = [
    "KAFKA_STEP_S",
    "KafkaOutage",
    "admin_call",
    "ask_brokers",
    "client_kwargs",
    "consumer_kwargs",
    "end_offsets",
    "kafka_unavailable",
    "producer_kwargs",
    "read_to_end",
    "remove_group_member",
    "topic_partitions",
]

log = logging.getLogger("kafkagen.kafka")

T = TypeVar("T")

KAFKA_STEP_S = 5.0
"""Seconds one step that aiokafka may retry forever is given before the caller moves on: a commit
(aiokafka 0.14 ``consumer/group_coordinator.py``: ``commit_offsets`` loops on
``ensure_coordinator_known``), leaving a group, stopping a client. Run it with
:func:`streams.bounded.within`; with all of Kafka down, a process's loop and its SIGTERM would
otherwise wait with it."""


def client_kwargs(settings: KafkaSettings, *, role: str) -> dict[str, Any]:
    """Connection and security arguments shared by every aiokafka client.

    Args:
        role: appended to the client id (``kafkagen-producer``), visible in broker logs.
    """
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": f"{settings.client_id}-{role}",
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kwargs["ssl_context"] = create_ssl_context(
            cafile=settings.ssl_cafile, certfile=settings.ssl_certfile, keyfile=settings.ssl_keyfile
        )
    if settings.security_protocol.startswith("SASL"):
        kwargs["sasl_mechanism"] = settings.sasl_mechanism or "PLAIN"
        kwargs["sasl_plain_username"] = settings.sasl_username
        kwargs["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return kwargs


def producer_kwargs(settings: KafkaSettings) -> dict[str, Any]:
    """Arguments for an idempotent ``AIOKafkaProducer`` (acks=all, zstd, sized for
    ``max_message_bytes``). Idempotence makes broker-side retries duplicate-free per partition
    (Kafka KIP-98)."""
    return {
        **client_kwargs(settings, role="producer"),
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": "zstd",
        "linger_ms": 20,
        "max_batch_size": 1024 * 1024,
        "max_request_size": settings.max_message_bytes,
    }


def consumer_kwargs(settings: KafkaSettings, *, group_id: str | None) -> dict[str, Any]:
    """Arguments for an ``AIOKafkaConsumer`` with manual commits (``enable_auto_commit=False``)
    and fetch sizes large enough for ``max_message_bytes`` records."""
    return {
        **client_kwargs(settings, role="consumer"),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": settings.max_message_bytes,
        "fetch_max_bytes": max(settings.max_message_bytes, 50 * 1024 * 1024),
        "isolation_level": "read_committed",
    }


async def ask_brokers(what: str, call: Callable[[], Awaitable[T]], *, timeout_s: float | None) -> T:
    """Await ``call()`` (one admin request or a few), asking again while Kafka answers with a
    retriable error, for up to ``timeout_s`` seconds (``None``: until the caller cancels). A call
    that is not idempotent must check first whether an earlier attempt was carried out (a request
    that timed out may have been).

    aiokafka 0.14's admin client sends each request to a random broker of its metadata
    (``aiokafka/admin/client.py`` ``_send_request``), which just after a broker died may be the
    dead one (``NodeNotReadyError``): the next attempt picks again (``docs/kafka.md``, "aiokafka").

    Raises:
        aiokafka.errors.KafkaError: a non-retriable error, or the last retriable one once
            ``timeout_s`` has passed.
    """
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(lambda e: isinstance(e, KafkaError) and e.retriable),
        stop=stop_never if timeout_s is None else stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        before_sleep=lambda state: log.info(
            "%s: %s; asking another broker", what, state.outcome and state.outcome.exception()
        ),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity either returns or re-raises")


async def admin_call(
    settings: KafkaSettings,
    what: str,
    call: Callable[[AIOKafkaAdminClient], Awaitable[T]],
    *,
    timeout_s: float = 30.0,
    role: str = "admin",
) -> T:
    """``call(admin)`` with an admin client started for it and closed after, asked again on a
    retriable error (:func:`ask_brokers`); all within ``timeout_s`` seconds. ``what`` names the
    call in the log lines; ``role`` goes into the client id (:func:`client_kwargs`).

    Raises:
        aiokafka.errors.KafkaError: a non-retriable error.
        TimeoutError: ``timeout_s`` passed first (also while retriable errors were still being
            asked again: the overall deadline wins over the last error).
    """
    admin = AIOKafkaAdminClient(
        **client_kwargs(settings, role=role), request_timeout_ms=max(1000, int(timeout_s * 1000))
    )
    async with asyncio.timeout(timeout_s):
        await admin.start()
        try:
            return await ask_brokers(what, lambda: call(admin), timeout_s=timeout_s)
        finally:
            await admin.close()


async def topic_partitions(settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> list[int]:
    """The partition numbers of ``topic`` as the cluster describes them now, sorted (empty when
    the topic does not exist).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    described = await admin_call(
        settings, f"describing {topic}", lambda admin: admin.describe_topics([topic]), timeout_s=timeout_s
    )
    return sorted(p["partition"] for t in described if not t.get("error_code") for p in t["partitions"])


async def end_offsets(
    settings: KafkaSettings,
    topic: str,
    *,
    partitions: list[int] | None = None,
    committed_only: bool = True,
    timeout_s: float = 30.0,
) -> dict[int, int]:
    """Partition → end offset of ``topic``. For a read_committed reader (``committed_only``) the
    last stable offset, so records of open or aborted transactions past it are not counted; else
    the log end offset (the high watermark: every record and transaction marker counts)
    (``AIOKafkaConsumer`` ``isolation_level``, aiokafka 0.14). ``partitions`` defaults to all of
    the topic's (:func:`topic_partitions`); a missing topic gives ``{}``.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    if partitions is None:
        partitions = await topic_partitions(settings, topic, timeout_s=timeout_s)
    if not partitions:
        return {}
    isolation = "read_committed" if committed_only else "read_uncommitted"
    consumer = AIOKafkaConsumer(**{**consumer_kwargs(settings, group_id=None), "isolation_level": isolation})
    async with asyncio.timeout(timeout_s):
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        finally:
            await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def read_to_end(
    settings: KafkaSettings, topic: str, *, stall_timeout_s: float = 30.0
) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    """Every committed record of ``topic``, in batches: read_committed, from the beginning of each
    partition to its last stable offset taken at the start (:func:`end_offsets`; later records are
    not read). A missing topic yields nothing. Order holds within a partition only.

    Raises:
        TimeoutError: no progress for ``stall_timeout_s`` seconds.
        aiokafka.errors.KafkaError: Kafka could not be read.
    """
    partitions = await topic_partitions(settings, topic)
    if not partitions:
        return
    tps = [TopicPartition(topic, p) for p in partitions]
    ends = {TopicPartition(topic, p): end for p, end in (await end_offsets(settings, topic)).items()}
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings, group_id=None))
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        last_progress = time.monotonic()
        while True:
            # a partition whose log ends in markers or aborted records reaches its end unread
            behind = [tp for tp in tps if await consumer.position(tp) < ends.get(tp, 0)]
            if not behind:
                return
            batch = await consumer.getmany(*behind, timeout_ms=500)
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise TimeoutError(f"reading {topic}: no progress for {stall_timeout_s:.0f} s")
            for tp, records in batch.items():
                kept = [r for r in records if r.offset < ends[tp]]
                if kept:
                    yield kept
    finally:
        await consumer.stop()


def kafka_unavailable(settings: KafkaSettings, exc: BaseException) -> UnavailableError:
    """The error a command ends with when Kafka cannot be reached (or stays silent) at start:
    one line naming the bootstrap servers and aiokafka's reason (exit status 3, :mod:`streams.cli`).
    Later outages are waited out by each component, not reported here."""
    name, text = type(exc).__name__, str(exc)
    detail = text if text.startswith(name) else f"{name}: {text}" if text else name
    return UnavailableError(f"Kafka at {settings.bootstrap_servers}: {detail}")


async def remove_group_member(settings: KafkaSettings, group: str, member_id: str) -> bool:
    """Remove ``member_id`` from consumer group ``group`` now (a LeaveGroup request sent to the
    group's coordinator on the member's behalf); True when the broker accepted it.

    For a static member (``group.instance.id``, KIP-345) that leaves for good: its client sends no
    LeaveGroup on close (aiokafka 0.14 ``_maybe_leave_group``; ``docs/kafka.md``, "aiokafka"). Call
    it after the member's consumer has stopped, so it cannot rejoin meanwhile. Best effort: failures
    are logged, never raised; the broker still expires the member after the session timeout.
    """
    if not member_id:
        return False
    admin = AIOKafkaAdminClient(**client_kwargs(settings, role="admin"))
    try:
        await admin.start()
        node = await admin.find_coordinator(group)
        response = await admin._send_request(LeaveGroupRequest(group, member_id), node)
        if response.error_code:
            raise for_code(response.error_code)(f"LeaveGroup for {member_id}")
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning(
            "could not remove member %s from group %s (%s): its partitions move after the session timeout",
            member_id,
            group,
            exc,
        )
        return False
    finally:
        await admin.close()
    log.info("removed member %s from group %s: its partitions move now", member_id, group)
    return True


class KafkaOutage:
    """Whether Kafka answers one long-running process, as its status line and metrics show it.

    Fed two ways: :meth:`watch` asks Kafka for its metadata every few seconds (so an idle process
    notices too), and the process reports its own failed and successful sends and commits
    (:meth:`failed`, :meth:`ok`). An outage is one warning when it starts, a reminder every
    ``remind_s`` seconds and one line when it ends; aiokafka's own per-connection lines are
    rate-limited by :class:`streams.logs.RepeatFilter`.

    Args:
        where: the bootstrap servers, for the log lines.
        logger: the process's logger.
        remind_s: seconds between reminders while the outage lasts.
    """

    def __init__(self, where: str, logger: logging.Logger, *, remind_s: float = 30.0) -> None:
        self.where = where
        self.log = logger
        self.remind_s = remind_s
        self.down_since: float | None = None
        """monotonic time the outage started; None while Kafka answers."""
        self._reminded = 0.0

    @property
    def up(self) -> bool:
        return self.down_since is None

    def down_for(self, now: float | None = None) -> float:
        """Seconds the current outage has lasted (0 while Kafka answers)."""
        if self.down_since is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.down_since

    def describe(self) -> str:
        """``up`` or ``UNREACHABLE for N s``, for status lines."""
        return "up" if self.down_since is None else f"UNREACHABLE for {self.down_for():.0f} s"

    def failed(self, reason: object) -> None:
        """A request to Kafka failed (``reason``: the error or a sentence)."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = self._reminded = now
            self.log.warning(
                "Kafka at %s does not answer (%s): commits and new records wait, nothing is lost",
                self.where,
                reason,
            )
        elif now - self._reminded >= self.remind_s:
            self._reminded = now
            self.log.warning("Kafka at %s unreachable for %.0f s: %s", self.where, self.down_for(now), reason)

    def ok(self) -> None:
        """A request to Kafka succeeded."""
        if self.down_since is not None:
            self.log.info("Kafka at %s answers again after %.0f s", self.where, self.down_for())
            self.down_since = None

    async def watch(
        self, consumer: AIOKafkaConsumer | Callable[[], AIOKafkaConsumer | None], *, interval_s: float = 5.0
    ) -> None:
        """Ask Kafka for its metadata (public ``consumer.topics()``) every ``interval_s`` seconds,
        forever (cancel the task to stop). ``consumer`` may be a function returning the current
        consumer (None: skip this turn)."""
        while True:
            current = consumer() if callable(consumer) else consumer
            if current is None:
                await asyncio.sleep(interval_s)
                continue
            try:
                await asyncio.wait_for(current.topics(), timeout=10.0)
            except (KafkaError, TimeoutError) as exc:
                self.failed(repr(exc))
            else:
                self.ok()
            await asyncio.sleep(interval_s)
