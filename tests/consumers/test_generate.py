"""The generation consumer as a real process against real Kafka and the SGLang-API simulator:
crash recovery (SIGKILL), dead letters, retries, server crash and hang, scaling."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections import Counter
from pathlib import Path

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import DeleteGroupsRequest

from consumers.generate import group_id
from consumers.servers.requests import request_id
from simulator import FaultConfig, SimulatedServer
from streams.config import Settings
from streams.kafka import client_kwargs
from streams.records import PromptRecord
from tests.consumers.support import TIME_SCALE, Fleet, completions, errors, wait_all_done, wait_settled
from tests.helpers import (
    broker_shapes,
    committed,
    holds,
    make_prompt,
    publish,
    spawn,
    unused_port,
    wait_for,
    with_kafka_at,
)


@broker_shapes()
async def test_happy_path_writes_one_completion_per_prompt_and_commits(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    prompts = [make_prompt(i, max_tokens=400) for i in range(60)]
    await publish(cs, prompts)
    proc = fleet.start("c0", sim.url)
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=90, fleet=fleet)
    assert not failed
    assert set(done.values()) == {1}
    records = await completions(cs)
    by_id = {r.id: r for r in records}
    sample = by_id["p-00007"]
    assert sample.prompt.messages == prompts[7].messages
    assert sample.usage.completion_tokens > 0
    assert sample.server == sim.url
    assert sample.model == "Qwen/Qwen3-8B"
    assert sample.params["chat_template_kwargs"] == {"enable_thinking": True}
    assert sample.params["max_tokens"] == 400
    assert sample.source is not None and sample.source.topic == cs.topics.prompts
    # Graceful stop commits everything.
    proc.terminate()
    assert proc.wait(30) == 0
    offsets = await committed(cs, group_id(cs), cs.topics.prompts)
    assert sum(o or 0 for o in offsets.values()) == 60


async def test_sigkill_with_a_slow_first_record_loses_nothing(
    cs: Settings,
    sim: SimulatedServer,
    fleet: Fleet,
) -> None:
    """One partition: offset 0 is slow, the rest fast. After the fast ones are written, SIGKILL:
    nothing was committed past offset 0, so a restart generates the slow one too."""
    one = cs.model_copy(update={"topics": cs.topics.model_copy(update={"partitions": 1})})
    fleet.settings = one
    slow = make_prompt(0, max_tokens=30000).model_copy() if False else make_prompt(0)
    slow = type(slow)(
        id=slow.id,
        messages=slow.messages,
        metadata=slow.metadata,
        params=type(slow.params)(max_tokens=20000, min_tokens=19000),
    )
    fast = [make_prompt(i, max_tokens=200) for i in range(1, 16)]
    await publish(one, [slow, *fast])
    fleet.start("c0", sim.url)

    async def fast_done() -> bool:
        fleet.assert_alive()
        return {p.id for p in fast} <= {r.id for r in await completions(one)}

    await wait_for(fast_done, timeout_s=60, what="the fast prompts")
    assert "p-00000" not in {r.id for r in await completions(one)}

    async def stops_at_0() -> bool:
        return await committed(one, group_id(one), one.topics.prompts) in ({0: 0}, {0: None})

    # a few commit intervals (0.3 s): the commit must still stop at offset 0
    await holds(stops_at_0, for_s=1.5, what="the commit stopping at the slow prompt's offset 0")
    fleet.kill("c0")

    fleet.start("c0", sim.url)
    done, failed = await wait_all_done(one, {slow.id, *(p.id for p in fast)}, timeout_s=120, fleet=fleet)
    assert not failed
    assert done[slow.id] >= 1
    duplicates = sum(n - 1 for n in done.values())
    assert duplicates <= len(fast), "only the uncommitted fast prompts may be generated again"


async def test_400_is_dead_lettered_and_503_burst_is_retried(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    too_long = make_prompt(999, content="word " * 200_000)  # over the simulated 32k context
    prompts = [make_prompt(i, max_tokens=200) for i in range(30)]
    await publish(cs, [too_long])
    fleet.start("c0", sim.url)
    await wait_all_done(cs, {too_long.id}, timeout_s=60)
    async with httpx.AsyncClient() as client:
        resp = await client.post(f"{sim.url}/simulator/faults", json={"error_503_count": 12})
        assert resp.status_code == 200
    await publish(cs, prompts)
    done, failed = await wait_all_done(cs, {too_long.id, *(p.id for p in prompts)}, timeout_s=90)
    assert set(failed) == {too_long.id}
    assert {p.id for p in prompts} <= set(done)
    [dead] = await errors(cs)
    assert dead.status == 400
    assert dead.retriable is False
    assert dead.attempts == 1
    assert dead.prompt is not None and dead.prompt.id == too_long.id
    assert "context length" in dead.message
    assert sim.stats().requests_rejected >= 12  # the 503s were really served and retried


async def test_a_rid_still_running_on_the_server_is_sent_again_without_marking_it_down(
    cs: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    """A prompt's new owner sends the rid its last owner sent (a consumer SIGKILLed and restarted,
    or a partition moved to the member whose server had the prompt lent: docs/consumer.md, "Tail
    lending"). While that request still runs there, SGLang refuses it (400 "Duplicate request ID",
    docs/servers.md, "Request ids"). The refusal says the server answers: the consumer sends again
    with the next rid and its server stays up; each prompt is written once. (A dashboard run showed
    the failure: three such refusals counted as server failures and marked a healthy server down.)"""
    prompts = [make_prompt(i, max_tokens=50) for i in range(6)]
    # real time: the held requests (30,000 tokens each) run for minutes, the consumer's for 0.2 s
    async with SimulatedServer() as server, httpx.AsyncClient(timeout=None) as http:
        held = [
            asyncio.create_task(
                http.post(
                    f"{server.url}/v1/chat/completions",
                    json={
                        "model": "Qwen/Qwen3-8B",
                        "messages": p.messages,
                        "rid": request_id(cs.run_id, p.id, p.attempt, 1),
                        "max_tokens": 30_000,
                        "min_tokens": 30_000,
                    },
                )
            )
            for p in prompts
        ]
        try:
            await wait_for(
                lambda: server.stats().running == len(prompts), timeout_s=30, what="the held requests"
            )
            await publish(cs, prompts)
            fleet.start("c0", server.url)
            done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=60, fleet=fleet)
            assert not failed and set(done.values()) == {1}, (done, failed)
            # the first send of every prompt met its rid still running
            assert server.stats().requests_rejected == len(prompts)
            log = (tmp_path / "c0.log").read_text(errors="replace")
            downs = [line for line in log.splitlines() if re.search(r"server \S+ down", line)]
            assert not downs, downs
        finally:
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)


async def test_aborts_with_a_status_and_failed_reasoning_parses_are_retried_to_completion(
    cs: Settings, fleet: Fleet
) -> None:
    """SGLang answers some requests with a 503 abort or a 500 "Failed to parse reasoning content",
    and a proxy may strip ``usage``: every prompt still ends in one completion, none is lost or
    dead-lettered (retries are bounded by ``max_attempts``, raised here so that a prompt failing
    that often is astronomically unlikely)."""
    s = cs.model_copy(update={"consumer": cs.consumer.model_copy(update={"max_attempts": 12})})
    fleet.settings = s
    faults = FaultConfig(abort_rate=0.15, abort_status=503, reasoning_parse_error_rate=0.15, omit_usage=True)
    prompts = [make_prompt(i, max_tokens=200) for i in range(40)]
    async with SimulatedServer(faults=faults, time_scale=TIME_SCALE) as sim:
        await publish(s, prompts)
        fleet.start("c0", sim.url)
        done, failed = await wait_all_done(s, {p.id for p in prompts}, timeout_s=120, fleet=fleet)
        served = sim.stats().requests_finished
    assert not failed
    assert set(done) == {p.id for p in prompts}
    assert served > len(prompts), "the faults were really served and retried"
    assert all(r.usage.completion_tokens == 0 for r in await completions(s)), "usage was stripped"


async def _two_server_failover(cs: Settings, fleet: Fleet, fault: dict[str, object]) -> None:
    async with SimulatedServer(time_scale=TIME_SCALE) as a, SimulatedServer(time_scale=TIME_SCALE) as b:
        prompts = [make_prompt(i, max_tokens=3000) for i in range(140)]
        await publish(cs, prompts)
        fleet.start("ca", a.url)
        fleet.start("cb", b.url)

        async def some_done() -> bool:
            fleet.assert_alive()
            return len({r.id for r in await completions(cs)}) >= 20

        await wait_for(some_done, timeout_s=60, what="the first completions")
        async with httpx.AsyncClient() as client:
            await client.post(f"{a.url}/simulator/faults", json=fault)
        done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=150, fleet=fleet)
        assert not failed
        assert set(done) == {p.id for p in prompts}


async def test_crashed_server_partitions_move_to_the_other_consumer(cs: Settings, fleet: Fleet) -> None:
    await _two_server_failover(cs, fleet, {"crash_after_s": 0})


async def test_hung_server_is_detected_and_its_partitions_move(cs: Settings, fleet: Fleet) -> None:
    await _two_server_failover(cs, fleet, {"hang": True})


async def _sigkilled_mid_run(cs: Settings, sim: SimulatedServer, fleet: Fleet) -> list[PromptRecord]:
    """120 prompts published, consumer ``c0`` SIGKILLed once 40 have a completion; the prompts."""
    prompts = [make_prompt(i, max_tokens=2000) for i in range(120)]
    await publish(cs, prompts)
    fleet.start("c0", sim.url)

    async def some_done() -> bool:
        fleet.assert_alive()
        return len(await completions(cs)) >= 40

    await wait_for(some_done, timeout_s=90, what="40 completions")
    fleet.kill("c0")
    return prompts


@broker_shapes()
async def test_sigkill_and_restart_loses_nothing_duplicates_bounded_by_window(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    prompts = await _sigkilled_mid_run(cs, sim, fleet)
    await wait_settled(cs)
    # what the SIGKILL may cost: the results written past the group's committed offsets (at most
    # the last commit interval's, never more than max_uncommitted per partition)
    commits = await committed(cs, group_id(cs), cs.topics.prompts)
    written = await completions(cs)
    uncommitted = {
        c.id
        for c in written
        if c.source is not None and c.source.offset >= (commits.get(c.source.partition) or 0)
    }
    fleet.start("c0", sim.url)
    done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=120, fleet=fleet)
    assert not failed
    twice = {i for i, n in done.items() if n > 1}
    assert twice <= uncommitted, f"committed prompts generated again: {sorted(twice - uncommitted)[:5]}"
    per_partition = Counter(c.source.partition for c in written if c.source is not None and c.id in twice)
    assert all(n <= cs.consumer.max_uncommitted for n in per_partition.values()), per_partition
    assert len(twice) < len(written), "the restart generated every written result again"


async def _expire_offsets(s: Settings, group: str) -> None:
    """What expired committed offsets leave (``offsets.retention.minutes`` after the group was
    emptied): no committed offset at all. DeleteGroups (Kafka API 42, which aiokafka 0.14's admin
    client builds but does not send) to the group's coordinator, asked again while a killed
    member's session still holds the group (NON_EMPTY_GROUP, code 68)."""
    admin = AIOKafkaAdminClient(**client_kwargs(s.kafka, role="test"))
    await admin.start()
    try:

        async def deleted() -> bool:
            response = await admin._send_request(
                DeleteGroupsRequest([group]), await admin.find_coordinator(group)
            )
            [(_, code)] = response.results
            assert code in (0, 68), f"DeleteGroups {group}: error code {code}"
            return bool(code == 0)

        await wait_for(deleted, timeout_s=60, what=f"group {group} deleted (its member's session to end)")
        assert not await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()


async def test_expired_committed_offsets_are_recovered_from_the_results(
    cs: Settings, sim: SimulatedServer, fleet: Fleet
) -> None:
    """Issue 25 item 3: a consumer SIGKILLed mid-run, its group's committed offsets then gone (as
    when they expire), 20 more prompts published meanwhile: the restarted consumer generates each
    prompt that has no result, and none that has one (not every prompt again from offset 0),
    and says what it did."""
    prompts = await _sigkilled_mid_run(cs, sim, fleet)
    await _expire_offsets(cs, group_id(cs))
    before = {c.id for c in await completions(cs)} | {e.id for e in await errors(cs)}
    later = [make_prompt(i, max_tokens=2000) for i in range(120, 140)]
    await publish(cs, later)
    fleet.start("c0", sim.url)
    done, failed = await wait_all_done(cs, {p.id for p in prompts + later}, timeout_s=120, fleet=fleet)
    assert not failed
    again = sorted(i for i, n in done.items() if n > 1)
    assert not again, f"{len(again)} prompts with a result were generated again, e.g. {again[:5]}"
    log = (fleet.logs / "c0.log").read_text()
    warned = r"WARNING kafkagen\.generate: partitions .* hold prompts but no committed offset"
    assert re.search(warned, log), "a warning, not an info line: " + log[-3000:]
    assert f"{len(before)} prompt records of them have a result and are skipped" in log, log[-3000:]


async def test_scaling_from_one_to_two_consumers_loses_nothing(cs: Settings, fleet: Fleet) -> None:
    async with SimulatedServer(time_scale=TIME_SCALE) as a, SimulatedServer(time_scale=TIME_SCALE) as b:
        prompts = [make_prompt(i, max_tokens=2000) for i in range(150)]
        await publish(cs, prompts)
        fleet.start("ca", a.url)

        async def some_done() -> bool:
            fleet.assert_alive()
            return len(await completions(cs)) >= 30

        await wait_for(some_done, timeout_s=90, what="30 completions")
        fleet.start("cb", b.url)
        # The first consumer may finish the first batch before the second joins: publish more once
        # the second holds partitions, so it has work of its own whatever the timing.
        log_b = fleet.logs / "cb.log"
        await wait_for(
            lambda: "assigned partitions [" in (log_b.read_text() if log_b.exists() else ""),
            timeout_s=90,
            what="the second consumer's assignment",
        )
        later = [make_prompt(i, max_tokens=2000) for i in range(150, 300)]
        await publish(cs, later)
        prompts += later
        done, failed = await wait_all_done(cs, {p.id for p in prompts}, timeout_s=150, fleet=fleet)
        assert not failed
        assert b.stats().requests_finished > 0, "the second consumer took over partitions"
        duplicates = sum(n - 1 for n in done.values())
        assert duplicates <= 2 * (16 + cs.consumer.standing_queue)


async def test_unreachable_kafka_is_a_clear_error_with_exit_3(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    nowhere = with_kafka_at(cs, "127.0.0.1:1")
    proc = spawn(["-m", "consumers.generate", "--server", sim.url], nowhere, tmp_path / "c.log")
    rc = await asyncio.to_thread(proc.wait, 120)
    assert rc == 3
    output = (tmp_path / "c.log").read_text()
    assert "error: Kafka at 127.0.0.1:1: KafkaConnectionError" in output
    assert "Traceback" not in output


async def test_a_silent_kafka_at_start_is_one_line_and_exit_3(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    # A broker address that accepts connections and never answers (half-dead broker, firewall).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        silent = f"127.0.0.1:{listener.getsockname()[1]}"
        nowhere = with_kafka_at(cs, silent)
        proc = spawn(["-m", "consumers.generate", "--server", sim.url], nowhere, tmp_path / "c.log")
        rc = await asyncio.to_thread(proc.wait, 120)
    finally:
        listener.close()
    output = (tmp_path / "c.log").read_text()
    assert rc == 3, output
    assert f"error: Kafka at {silent}:" in output
    assert "Traceback" not in output


async def test_sigterm_while_waiting_for_the_server_exits_0_at_once(cs: Settings, tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{unused_port()}"
    proc = spawn(["-m", "consumers.generate", "--server", nobody], cs, tmp_path / "c.log")
    await wait_for(
        lambda: "waiting for server" in (tmp_path / "c.log").read_text(), timeout_s=30, what="the wait"
    )
    proc.send_signal(signal.SIGTERM)
    rc = await asyncio.to_thread(proc.wait, 20)
    output = (tmp_path / "c.log").read_text()
    assert rc == 0, output
    assert "stopped before server" in output and "Traceback" not in output


@pytest.mark.parametrize(
    "argv", [["--server", "notaurl"], ["--server", "http://x:1", "--metrics-port", "99999"]]
)
async def test_a_bad_server_url_or_metrics_port_is_a_usage_error(
    cs: Settings, tmp_path: Path, argv: list[str]
) -> None:
    proc = spawn(["-m", "consumers.generate", *argv], cs, tmp_path / "c.log")
    rc = await asyncio.to_thread(proc.wait, 60)
    output = (tmp_path / "c.log").read_text()
    assert rc == 2, output
    assert "Traceback" not in output


async def test_malformed_settings_exit_2_without_traceback(cs: Settings, tmp_path: Path) -> None:
    proc = spawn(
        ["-m", "consumers.generate", "--server", "http://127.0.0.1:9"],
        cs,
        tmp_path / "c.log",
        extra_env={"KAFKAGEN_GENERATION__CHAT_TEMPLATE_KWARGS": "{bad"},
    )
    rc = await asyncio.to_thread(proc.wait, 60)
    assert rc == 2
    output = (tmp_path / "c.log").read_text()
    assert "invalid settings" in output
    assert "Traceback" not in output
