"""Regression tests of the generation consumer's guarantees under bad schedules (issue 9): each
runs real consumer processes against real Kafka and SGLang-API simulators and checks the output
topics and committed offsets, not the consumer's own account."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from consumers.generate import GenerationConsumer, group_id
from launch.stack import LocalStack
from simulator import SimulatedServer
from streams.config import Settings
from streams.kafka import producer_kwargs
from streams.records import GenerationParams, PromptRecord, encode
from streams.topics import ensure_topics, topic_specs
from tests.consumers.support import TIME_SCALE, Fleet, completions, errors, wait_all_done
from tests.helpers import (
    broker_shapes,
    committed,
    holds,
    make_prompt,
    metric_value,
    publish,
    spawn,
    unused_port,
    wait_for,
)


def _with(settings: Settings, *, partitions: int | None = None, **consumer: object) -> Settings:
    """``settings`` with another partition count and consumer settings."""
    topics = settings.topics.model_copy(update={"partitions": partitions or settings.topics.partitions})
    return settings.model_copy(
        update={"topics": topics, "consumer": settings.consumer.model_copy(update=consumer)}
    )


def _assignments(log: Path) -> list[set[int]]:
    """Every assignment a consumer logged, in order."""
    text = log.read_text() if log.exists() else ""
    return [
        {int(p) for p in m.group(1).split(",") if p.strip()}
        for m in re.finditer(r"assigned partitions \[([0-9, ]*)\]", text)
    ]


@broker_shapes()
async def test_a_rebalance_while_the_server_is_down_loses_no_prompt(cs: Settings, fleet: Fleet) -> None:
    """Consumer X's server is down (503 on everything) when a second consumer joins: the new
    assignment X receives is not paused yet, and the records it fetches must be kept, not dropped
    (before the fix one prompt per run was lost and committed past)."""
    s = _with(cs, partitions=4, down_grace_s=120.0)
    fleet.settings = s
    async with (
        SimulatedServer(time_scale=TIME_SCALE) as x,
        SimulatedServer(time_scale=TIME_SCALE) as y,
    ):
        first = [make_prompt(i, max_tokens=50) for i in range(4)]
        await publish(s, [])
        fleet.start("cx", x.url)
        log_x = fleet.logs / "cx.log"
        await wait_for(lambda: _assignments(log_x), timeout_s=90, what="X's first assignment")
        x.set_faults(draining=True)  # /health_generate and every request answer 503
        await publish(s, first)
        await wait_for(
            lambda: "pausing" in (log_x.read_text() if log_x.exists() else ""),
            timeout_s=90,
            what="consumer X to mark its server down",
        )
        prompts = [make_prompt(i, max_tokens=50) for i in range(4, 304)]
        await publish(s, prompts)
        fleet.start("cy", y.url)
        await wait_for(lambda: len(_assignments(log_x)) >= 2, timeout_s=90, what="X's second assignment")

        async def y_generates() -> bool:  # the group settled and fetches while X's server is down
            return sum(1 for c in await completions(s) if c.server == y.url) >= 20

        await wait_for(y_generates, timeout_s=90, what="20 completions from Y's server")
        x.clear_faults()
        ids = {p.id for p in first + prompts}
        done, failed = await wait_all_done(s, ids, timeout_s=180)
        assert not failed
        assert set(done) == ids
        fleet.stop_all()
    # Every offset below each partition's committed offset has its completion (the prompts were
    # published without transactions, so offsets are consecutive): nothing was committed past.
    results = {(r.source.partition, r.source.offset) for r in await completions(s) if r.source}
    for p, end in (await committed(s, group_id(s), s.topics.prompts)).items():
        assert set(range(end or 0)) <= {o for (q, o) in results if q == p}, f"partition {p}"


async def test_duplicates_after_sigkill_are_bounded_by_max_uncommitted(cs: Settings, fleet: Fleet) -> None:
    """One partition: a slow prompt at its head and many fast prompts behind it. The consumer
    starts at most ``max_uncommitted`` prompts past the committed offset, so a SIGKILL re-generates
    at most that many (before the fix: every fast prompt finished behind the slow head, 772 of
    1,000 generated twice with a window of 20)."""
    limit = 40
    s = _with(cs, partitions=1, max_uncommitted=limit, hang_timeout_s=300.0)
    fleet.settings = s
    slow = PromptRecord(
        id="p-slow",
        messages=[{"role": "user", "content": "a long one"}],
        params=GenerationParams(max_tokens=30000, min_tokens=30000),
        metadata=make_prompt(0).metadata,
    )
    fast = [make_prompt(i, max_tokens=100) for i in range(1, 301)]
    await publish(s, [slow, *fast])
    async with SimulatedServer(time_scale=5.0) as sim:  # the slow one takes ~25 s of wall time
        fleet.start("c0", sim.url)

        async def started_span() -> bool:
            return len(await completions(s)) >= limit - 1

        await wait_for(started_span, timeout_s=120, what=f"{limit - 1} fast completions")

        async def within_span() -> bool:
            return len(await completions(s)) <= limit - 1

        # 3 s would be enough for the other 260 fast prompts
        await holds(within_span, for_s=3, what="no prompt started past the uncommitted span")
        before_kill = Counter(r.id for r in await completions(s))
        assert slow.id not in before_kill
        assert len(before_kill) <= limit - 1, "started prompts past the uncommitted span limit"
        fleet.kill("c0")
        fleet.start("c0", sim.url)
        done, failed = await wait_all_done(s, {slow.id, *(p.id for p in fast)}, timeout_s=300)
    assert not failed
    duplicates = sum(n - 1 for n in done.values())
    assert duplicates <= limit


async def test_commits_never_pass_a_prefetched_record(cs: Settings, fleet: Fleet) -> None:
    """The consumer fetches up to ``prefetch`` prompts ahead of its window, tracked but not
    started. The committed offset stays below the first unfinished one, so a SIGKILL while they
    wait loses none of them."""
    s = _with(cs, partitions=1, max_in_flight=2, standing_queue=0, prefetch=50, hang_timeout_s=300.0)
    fleet.settings = s
    prompts = [make_prompt(i, max_tokens=400) for i in range(40)]
    await publish(s, prompts, partition=0)
    async with SimulatedServer(time_scale=5.0) as sim:  # ~0.4 s of wall time a prompt, 2 at a time
        fleet.start("c0", sim.url)

        async def some_done() -> bool:
            return len(await completions(s)) >= 6

        await wait_for(some_done, timeout_s=120, what="6 completions")

        async def some_committed() -> bool:
            return bool((await committed(s, group_id(s), s.topics.prompts))[0])

        await wait_for(some_committed, timeout_s=30, what="a first commit")
        offset = (await committed(s, group_id(s), s.topics.prompts))[0] or 0
        done = {r.source.offset for r in await completions(s) if r.source is not None}
        assert set(range(offset)) <= done, f"committed {offset} past an unfinished prompt: {sorted(done)}"
        assert 0 < offset < len(prompts), "the test needs a commit while prompts still wait"
        fleet.kill("c0")
        fleet.start("c0", sim.url)
        finished, failed = await wait_all_done(s, {p.id for p in prompts}, timeout_s=180)
    assert not failed
    assert set(finished) == {p.id for p in prompts}


async def _publish_raw(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    """Publish raw ``(key, value)`` pairs to partition 0 of the prompts topic, in order."""
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(specs["prompts"].name, value, key=key, partition=0)
    finally:
        await producer.stop()


@broker_shapes()
async def test_every_prompt_ends_in_a_record_even_when_its_dead_letter_is_too_large(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    """A dead letter embeds the prompt or the raw bytes, which can outgrow the record limit (raw
    bytes 3x through replacement characters; a prompt near the limit plus the error). It is
    trimmed to fit, with the reason, and the partition goes on (before the fix the exception
    escaped the prompt's task and pinned the partition's commits forever)."""
    s = _with(cs, partitions=1)
    fleet.settings = s
    limit = s.kafka.max_message_bytes
    near_limit = make_prompt(1, content="x" * (limit - 600))  # over the context: a 400, dead-lettered
    undecodable = b"\xff" * (limit // 2)  # 3 bytes per replacement character once decoded
    normal = [make_prompt(i, max_tokens=50) for i in range(2, 12)]
    big_key_id = "\ufffd" * 64 + f"...{s.topics.prompts}+0+3"
    await _publish_raw(
        s,
        [(b"p-00000", encode(make_prompt(0, max_tokens=50))), (b"p-00001", encode(near_limit))]
        + [(b"poison", undecodable), (b"\xff" * 1_200_000, b"not json")]
        + [(p.id.encode(), encode(p)) for p in normal],
    )
    fleet.start("c0", sim.url)
    ids = {"p-00000", "p-00001", "poison", big_key_id, *(p.id for p in normal)}
    _, failed = await wait_all_done(s, ids, timeout_s=120)
    assert set(failed) == {"p-00001", "poison", big_key_id}
    dead = {e.id: e for e in await errors(s)}
    assert "trimmed to fit" in dead["poison"].message and dead["poison"].raw is not None
    assert dead["poison"].error_type == "RecordDecodeError"
    assert "trimmed to fit" in dead["p-00001"].message and "prompt left out" in dead["p-00001"].message
    assert dead["p-00001"].source is not None and dead["p-00001"].source.offset == 1

    async def all_committed() -> bool:
        return (await committed(s, group_id(s), s.topics.prompts)).get(0) == 4 + len(normal)

    await wait_for(all_committed, timeout_s=60, what="the commit past every record")


async def test_max_attempts_holds_while_the_server_is_marked_down(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    """Every request answers 503 while the health probe passes: the server flips down and up. A
    prompt is still sent at most ``max_attempts`` times (before the fix: attempts 6 of 5)."""
    s = _with(cs, max_attempts=2, down_after_failures=2)
    fleet.settings = s
    sim.set_faults(error_503_for_s=10_000.0)
    prompts = [make_prompt(i, max_tokens=50) for i in range(12)]
    await publish(s, prompts)
    fleet.start("c0", sim.url)
    _, failed = await wait_all_done(s, {p.id for p in prompts}, timeout_s=120)
    assert set(failed) == {p.id for p in prompts}
    assert {e.attempts for e in await errors(s)} <= {1, 2}
    assert max(e.attempts for e in await errors(s)) == 2


async def test_losing_a_member_moves_only_its_partitions(cs: Settings, fleet: Fleet) -> None:
    """Three consumers on seven partitions; one is SIGKILLed. With a sticky assignment the two
    survivors keep every partition they had and only take over the dead member's (round-robin,
    before the fix, reshuffled them and orphaned healthy in-flight work)."""
    async with (
        SimulatedServer(time_scale=TIME_SCALE) as a,
        SimulatedServer(time_scale=TIME_SCALE) as b,
        SimulatedServer(time_scale=TIME_SCALE) as c,
    ):
        await publish(cs, [make_prompt(i, max_tokens=50) for i in range(21)])
        for name, server in (("ca", a), ("cb", b), ("cc", c)):
            fleet.start(name, server.url)
        logs = {name: fleet.logs / f"{name}.log" for name in ("ca", "cb", "cc")}

        def settled() -> bool:
            last = [_assignments(log)[-1] if _assignments(log) else set() for log in logs.values()]
            return sorted(p for parts in last for p in parts) == list(range(7)) and all(last)

        await wait_for(settled, timeout_s=120, what="three members sharing seven partitions")
        seen = {name: len(_assignments(log)) for name, log in logs.items()}
        await holds(
            lambda: {name: len(_assignments(log)) for name, log in logs.items()} == seen,
            for_s=2,
            what="the three members' assignment (no rebalance pending)",
        )
        before = {name: _assignments(log)[-1] for name, log in logs.items()}
        fleet.kill("cc")

        def reassigned() -> bool:
            return all(len(_assignments(logs[n])) > seen[n] for n in ("ca", "cb")) and sorted(
                p for n in ("ca", "cb") for p in _assignments(logs[n])[-1]
            ) == list(range(7))

        await wait_for(reassigned, timeout_s=120, what="the survivors to take over")
        for name in ("ca", "cb"):
            assert before[name] <= _assignments(logs[name])[-1], f"{name} lost a partition it had"


async def test_a_dead_servers_partitions_make_progress_elsewhere_within_seconds(
    cs: Settings, fleet: Fleet
) -> None:
    """Consumer A gives up on its crashed server after ``down_grace_s``; its partitions must make
    progress on consumer B within seconds, not after the static member's session timeout (45 s
    here; before the fix the handover waited for it)."""
    s = _with(cs, down_grace_s=2.0, session_timeout_ms=45_000, heartbeat_interval_ms=1000)
    fleet.settings = s
    async with (
        SimulatedServer(time_scale=TIME_SCALE) as a,
        SimulatedServer(time_scale=TIME_SCALE) as b,
    ):
        await publish(s, [make_prompt(i, max_tokens=50) for i in range(14)])
        fleet.start("ca", a.url)
        fleet.start("cb", b.url)
        log_a = fleet.logs / "ca.log"
        await wait_for(
            lambda: (
                len(_assignments(log_a)) >= 1
                and len(_assignments(fleet.logs / "cb.log")) >= 1
                and sorted(p for n in ("ca", "cb") for p in _assignments(fleet.logs / f"{n}.log")[-1])
                == list(range(7))
            ),
            timeout_s=120,
            what="both consumers to share the partitions",
        )
        a_parts = _assignments(log_a)[-1]
        await wait_all_done(s, {f"p-{i:05d}" for i in range(14)}, timeout_s=90)
        a.set_faults(crash_after_s=0)
        more = [make_prompt(i, max_tokens=50) for i in range(100, 240)]
        await publish(s, more)
        await wait_for(
            lambda: "leaving group" in log_a.read_text(), timeout_s=120, what="A to give up on its server"
        )

        async def b_works_on_a_partitions() -> bool:
            return any(
                r.consumer == "cb" and r.source is not None and r.source.partition in a_parts
                for r in await completions(s)
                if r.id in {p.id for p in more}
            )

        await wait_for(b_works_on_a_partitions, timeout_s=20, what="B to generate A's partitions")


async def test_a_server_whose_throughput_collapses_gives_up_its_partitions(
    cs: Settings, fleet: Fleet
) -> None:
    """Server A becomes 100x slower but keeps answering: its consumer notices the output rate
    fall far below its own recent peak, gives up its partitions, and B finishes them (before the
    fix A's partitions crawled on while B idled)."""
    s = _with(
        cs,
        hang_timeout_s=600.0,
        watchdog_window_s=3.0,
        watchdog_collapse_s=3.0,
        watchdog_hold_s=600.0,
    )
    fleet.settings = s
    async with SimulatedServer(time_scale=2.0) as a, SimulatedServer(time_scale=2.0) as b:
        prompts = [make_prompt(i, max_tokens=200) for i in range(1500)]
        await publish(s, prompts)
        fleet.start("ca", a.url)
        fleet.start("cb", b.url)
        log_a = fleet.logs / "ca.log"

        async def a_at_speed() -> bool:
            return sum(r.consumer == "ca" for r in await completions(s)) >= 150

        await wait_for(a_at_speed, timeout_s=120, what="A's first 150 completions")
        a.set_faults(slow_factor=100.0)
        await wait_for(
            lambda: "throughput collapsed" in log_a.read_text(), timeout_s=60, what="A's collapse verdict"
        )
        done, failed = await wait_all_done(s, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed
    assert set(done) == {p.id for p in prompts}


async def _metric(port: int, name: str) -> float | None:
    """One sample of a consumer's ``/metrics`` (None when it does not answer)."""
    try:
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5)).text
    except httpx.HTTPError:
        return None
    return metric_value(text, name)


async def _one_consumer_on(
    own_kafka: LocalStack, cs: Settings, sim: SimulatedServer, fleet: Fleet, tmp_path: Path, n: int
) -> tuple[Settings, int, list[PromptRecord], subprocess.Popen[bytes]]:
    """``n`` prompts on the test's own broker and consumer ``c0`` (its metrics on a free port)
    generating them: (settings, metrics port, prompts, process)."""
    cs = cs.model_copy(update={"kafka": own_kafka.settings.kafka})
    fleet.settings = cs
    port = unused_port()
    prompts = [make_prompt(i, max_tokens=3000) for i in range(n)]
    await publish(cs, prompts)
    proc = spawn(
        ["-m", "consumers.generate", "--server", sim.url, "--instance-id", "c0", "--metrics-port", str(port)],
        cs,
        tmp_path / "c0.log",
    )
    fleet.procs["c0"] = proc
    return cs, port, prompts, proc


async def test_a_kafka_outage_shows_in_status_and_metrics_and_loses_nothing(
    cs: Settings, sim: SimulatedServer, fleet: Fleet, own_kafka: LocalStack, tmp_path: Path
) -> None:
    """The test's own broker stops for ~20 s under a working consumer: ``kafkagen_generate_kafka_up`` drops to
    0, the status line says UNREACHABLE (before: "server up" and nothing else), the outage is a
    handful of lines, not one per record, and once Kafka is back every prompt is generated."""
    cs, port, prompts, proc = await _one_consumer_on(own_kafka, cs, sim, fleet, tmp_path, 200)
    log = tmp_path / "c0.log"

    async def some_done() -> bool:
        return len(await completions(cs)) >= 20

    await wait_for(some_done, timeout_s=90, what="the first completions")
    assert await _metric(port, "kafkagen_generate_kafka_up") == 1.0
    before = len(log.read_text().splitlines())
    assert own_kafka.processes.stop("kafka")
    try:

        async def kafka_down() -> bool:
            return await _metric(port, "kafkagen_generate_kafka_up") == 0.0

        await wait_for(kafka_down, timeout_s=60, what="kafkagen_generate_kafka_up 0")
        await wait_for(
            lambda: "kafka UNREACHABLE for" in log.read_text(), timeout_s=30, what="the status line"
        )
        await holds(lambda: proc.poll() is None, for_s=5, what="the consumer waiting Kafka out")
        ours = [
            line
            for line in log.read_text().splitlines()[before:]
            if "kafkagen.generate" in line and "Kafka" in line and "UNREACHABLE" not in line
        ]
        assert len(ours) <= 3, "\n".join(ours)
    finally:
        await asyncio.to_thread(own_kafka.up, ["kafka"])
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed and set(done) == {p.id for p in prompts}

    async def kafka_up() -> bool:
        return await _metric(port, "kafkagen_generate_kafka_up") == 1.0

    await wait_for(kafka_up, timeout_s=60, what="kafkagen_generate_kafka_up 1 again")


async def test_a_sigterm_while_all_of_kafka_is_down_exits_within_its_deadline_and_loses_nothing(
    cs: Settings, sim: SimulatedServer, fleet: Fleet, own_kafka: LocalStack, tmp_path: Path
) -> None:
    """The fault audit's overlapping schedule found it: SIGTERMed while every broker is down, the
    consumer's last commit (and leaving the group) waited for a coordinator forever, so a
    supervisor SIGKILLed it. Now each waits a bounded time: exit 0 within the shutdown deadline
    plus 25 s; what it had not committed is generated by the next consumer, nothing is lost."""
    cs, port, prompts, proc = await _one_consumer_on(own_kafka, cs, sim, fleet, tmp_path, 60)

    async def some_done() -> bool:
        return len(await completions(cs)) >= 10

    await wait_for(some_done, timeout_s=90, what="the first completions")
    assert own_kafka.processes.stop("kafka")
    try:

        async def kafka_down() -> bool:
            return await _metric(port, "kafkagen_generate_kafka_up") == 0.0

        await wait_for(kafka_down, timeout_s=60, what="kafkagen_generate_kafka_up 0")
        bound_s = cs.consumer.shutdown_deadline_s + 25
        sent = time.monotonic()
        proc.terminate()
        status = await asyncio.to_thread(proc.wait, bound_s + 30)  # TimeoutExpired: it hangs
        assert status == 0, (tmp_path / "c0.log").read_text()[-3000:]
        assert time.monotonic() - sent <= bound_s
        del fleet.procs["c0"]  # stopped on purpose
    finally:
        await asyncio.to_thread(own_kafka.up, ["kafka"])
    fleet.start("c1", sim.url)
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
    assert not failed and set(done) == {p.id for p in prompts}


async def test_generations_longer_than_the_hang_timeout_are_not_abandoned(cs: Settings, fleet: Fleet) -> None:
    """Every request in flight runs longer than ``hang_timeout_s`` (long reasoning at the tail of
    a run) on a server that is generating the whole time. Before the fix the consumer called it
    hung, abandoned every request and retried it until ``max_attempts``: all were dead-lettered.
    Now the server's generation probe passes, and each prompt completes once, at its first attempt."""
    s = _with(cs, hang_timeout_s=3.0, max_attempts=3)
    fleet.settings = s
    # In real time, 3000 tokens at about 240 tokens/s: each request takes over 12 s, four times
    # the hang timeout, and all six run at once.
    async with SimulatedServer(time_scale=1.0) as slow:
        prompts = [make_prompt(i, max_tokens=3000, min_tokens=3000) for i in range(6)]
        await publish(s, prompts)
        fleet.start("c0", slow.url)
        done, failed = await wait_all_done(s, {p.id for p in prompts}, timeout_s=120, fleet=fleet)
    assert not failed, [e.message for e in await errors(s)]
    assert done == Counter({p.id: 1 for p in prompts})
    log = (fleet.logs / "c0.log").read_text()
    assert "but it is generating; not hung" in log
    assert "hung:" not in log


async def test_joining_a_group_takes_one_generation_per_membership_change(cs: Settings) -> None:
    """aiokafka 0.14 sends one JoinGroup per listed assignor, each with a longer protocol list
    (``consumer/group_coordinator.py`` ``perform_group_join``). Kafka takes the second one,
    arriving after the join completed, as changed metadata and rebalances again, so each join
    cost one more generation. With churn, members kept re-sending both JoinGroups and the group
    never settled (finding F1: 9 members, generation 2,900 in 4 minutes, nothing generated). The
    consumer lists one assignor, so a lone member of a new group is assigned in generation 1,
    and a second member's join moves it to generation 2, not 4."""
    async with SimulatedServer(time_scale=TIME_SCALE) as sim:
        await publish(cs, [make_prompt(i, max_tokens=50) for i in range(14)])
        first = GenerationConsumer(cs, sim.url, instance_id="g1")
        second = GenerationConsumer(cs, sim.url, instance_id="g2")
        tasks = [asyncio.create_task(first.run())]
        try:

            def generation(worker: GenerationConsumer) -> int:
                consumer = worker._consumer
                return -1 if consumer is None else int(consumer._coordinator.generation)

            def owns(worker: GenerationConsumer, count: int) -> bool:
                return len(worker.tracker.assigned) == count

            await wait_for(lambda: owns(first, 7), timeout_s=60, what="the first member to own 7 partitions")
            assert generation(first) == 1
            tasks.append(asyncio.create_task(second.run()))
            await wait_for(
                lambda: len(first.tracker.assigned) in (3, 4) and len(second.tracker.assigned) in (3, 4),
                timeout_s=60,
                what="the two members to share the partitions",
            )
            await holds(  # a doubled JoinGroup would rebalance once more within this window
                lambda: generation(first) == generation(second) == 2,
                for_s=3,
                what="generation 2 for both members",
            )
        finally:
            for worker in (first, second):
                worker.stop()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)


@pytest.mark.parametrize("brokers", [pytest.param(3, id="3brokers")])
async def test_consumers_started_while_a_broker_is_down_generate_every_prompt(
    cs: Settings, sim: SimulatedServer, fleet: Fleet, kafka_cluster_stack: LocalStack
) -> None:
    """Two consumers start the moment one of 3 brokers is SIGKILLed, while the metadata still
    lists it: they wait the partial cluster out and generate every prompt, neither exits (one
    exited 3 on NodeNotReadyError, node 2, with brokers 1 and 3 up; fault audit seed 31337)."""
    prompts = [make_prompt(i) for i in range(80)]
    await publish(cs, prompts)
    assert kafka_cluster_stack.kill("kafka-2")
    try:
        fleet.start("c0", sim.url)
        fleet.start("c1", sim.url)
        done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=180, fleet=fleet)
        assert not failed and set(done) == {p.id for p in prompts}
        fleet.assert_alive()
    finally:
        await asyncio.to_thread(kafka_cluster_stack.up, ["kafka-2"])
