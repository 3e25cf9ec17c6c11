"""The rates a member reports and the projection built on them (streams/control.py
``window_rates``, consumers/quality/fleet_gate.py, launch/status/projection.py): measured from the
member's first result on, not from its process start (the ramp-up before it is not the pace of the
run), and GPU-hours integrated over every member's held time, not the live servers alone."""

from __future__ import annotations

import logging
import math
import types

import msgspec
import pytest

from consumers.quality import fleet_gate
from consumers.quality.fleet_gate import FleetGate
from launch.status.projection import drain_finish, project, server_seconds
from launch.status.shape import GroupMember, Observation, rate_span, shape
from streams.config import Settings
from streams.control import (
    RATE_WINDOW_S,
    ControlState,
    MemberLoad,
    MemberReport,
    decode_control,
    window_rates,
)
from streams.kafka import KafkaOutage
from streams.records import Usage

NOW = 1_800_000_000.0


class _Clock:
    """A settable clock standing for the ``time`` module in :mod:`consumers.quality.fleet_gate`:
    ``monotonic()`` is ``t``, ``time()`` is ``NOW + t``."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        return NOW + self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(fleet_gate, "time", types.SimpleNamespace(monotonic=c.monotonic, time=c.time))
    return c


def _gate(settings: Settings | None = None) -> FleetGate:
    outage = KafkaOutage("k", logging.getLogger("t"))
    return FleetGate(
        settings or Settings(run_id="r"),
        instance_id="a",
        server_url="http://a",
        kafka=outage,
        load=MemberLoad,
    )


def test_a_members_rate_starts_at_its_first_result_not_at_its_start(clock: _Clock) -> None:
    """Started at 0, nothing answered for 30 s (discovery, a whole request lifetime), then one
    100-token result a second: at 120 s it reports 1 result/s and 100 tokens/s, the pace it goes
    at (counted from its start, it was 91/120 = 0.76/s: a finish projected 32% late)."""
    gate = _gate()
    for t in range(30, 121):
        clock.t = float(t)
        gate.count([], Usage(completion_tokens=100))
    report = gate.report()
    assert (report.completions_per_s, report.tokens_per_s) == (1.0, 100.0)
    assert report.rate_since == NOW + 30 and rate_span(report) == 90.0
    # 100 s later, the window is the last RATE_WINDOW_S seconds
    for t in range(121, 221):
        clock.t = float(t)
        gate.count([], Usage(completion_tokens=100))
    report = gate.report()
    assert report.completions_per_s == 1.0 and rate_span(report) == RATE_WINDOW_S
    # no result yet: no rate (a first result alone is no rate either)
    fresh = _gate()
    assert fresh.report().tokens_per_s == 0.0
    fresh.count([], Usage(completion_tokens=100))
    assert fresh.report().tokens_per_s == 0.0


def test_window_rates_count_only_the_results_after_the_windows_start() -> None:
    acks = [(10.0, 5), (11.0, 7), (12.0, 9), (200.0, 4)]
    assert window_rates(acks, None, 50.0) == (0.0, 0.0, 50.0)
    assert window_rates(acks, 10.0, 10.0) == (0.0, 0.0, 10.0)
    assert window_rates(acks, 10.0, 12.0) == (8.0, 1.0, 10.0)  # 16 tokens, 2 results, over 2 s
    assert window_rates(acks, 10.0, 200.0) == (4 / 120, 1 / 120, 80.0)


def test_a_report_of_an_older_consumer_still_decodes_and_keeps_its_window() -> None:
    """MemberReport gained ``rate_since`` and ``earlier_s`` with defaults: a report written before
    them decodes, and its rates are taken as over the last RATE_WINDOW_S since its start."""
    old = (
        b'{"kind":"member","run_id":"r","instance":"a","incarnation":"x","host":"h","pid":1,'
        b'"server":"http://a","started_at":1000.0,"at":1060.0,"completions_per_s":2.0}'
    )
    report = decode_control(old)
    assert isinstance(report, MemberReport) and (report.rate_since, report.earlier_s) == (0.0, 0.0)
    assert rate_span(report) == 60.0
    assert rate_span(msgspec.structs.replace(report, at=2000.0)) == RATE_WINDOW_S
    assert server_seconds(report) == 60.0


def _member(instance: str, started_at: float, at: float, tokens: int, **kw: object) -> MemberReport:
    return MemberReport(
        run_id="r", instance=instance, incarnation="x", host="h", pid=1, server=f"http://{instance}",
        started_at=started_at, at=at, completions=tokens // 100, completion_tokens=tokens,
        completion_tokens_sq=(tokens // 100) * 100 * 100, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_gpu_hours_integrate_the_servers_over_time() -> None:
    """Two hours into a run: a and b ran all along, c and d stopped after the first hour, e's
    first process ran the first hour (``earlier_s``) and its second the last half hour: 7.5
    server-hours so far, 3 live servers and 1 hour to go, 10.5 in all (the live servers times the
    run's wall time, as before, said 3 × 3 = 9)."""
    t0 = NOW - 2 * 3600
    members = [
        _member("a", t0, NOW, 100_000),  # 2 h so far
        _member("b", t0, NOW, 100_000),  # 2 h
        _member("c", t0, t0 + 3600, 50_000, state="stopped"),  # 1 h, stopped
        _member("d", t0, t0 + 3600, 50_000, state="stopped"),  # 1 h, stopped
        _member("e", NOW - 1800, NOW, 25_000, earlier_s=3600.0),  # its earlier process 1 h, now 0.5 h
    ]
    total_results = sum(m.completions for m in members)
    p = project(members, at=NOW, total=2 * total_results, results=total_results,
                tokens_per_s=325_000 / 3600, live_servers=3, started_at=t0)  # fmt: skip
    assert p is not None and p.finish_at is not None
    assert math.isclose(p.finish_at.value, NOW + 3600)  # 325,000 tokens to come at 325,000 per hour
    held = 2 + 2 + 1 + 1 + 1.5
    assert p.gpu_hours_so_far is not None and math.isclose(p.gpu_hours_so_far, held)
    assert p.gpu_hours is not None and math.isclose(p.gpu_hours.value, held + 3 * 1)
    # a finished run: what the members held, no live server needed
    done = project(members, at=NOW, total=total_results, results=total_results, tokens_per_s=0.0,
                   live_servers=0, started_at=t0)  # fmt: skip
    assert done is not None and done.gpu_hours is not None and math.isclose(done.gpu_hours.value, held)


async def test_a_restarted_consumer_carries_its_earlier_processes_held_time(clock: _Clock) -> None:
    """FleetGate.start continues ``earlier_s`` from its instance's last report: that process ran
    from its ``started_at`` to its last ``at``, plus what it carried itself."""
    gate = _gate()
    own = _member("a", NOW - 500, NOW - 100, 1000, earlier_s=50.0)
    state = ControlState(members={"a": own})

    async def start(*, timeout_s: float = 30.0) -> ControlState:
        return state

    gate.control.start = start  # type: ignore[method-assign]
    await gate.start()
    assert gate.report().earlier_s == 50.0 + 400.0


def _run(b_at: float, *, lends: bool = False) -> Observation:
    """7 partitions of 100 prompts: member a holds 0-3 (80 left each: 320), b holds 4-6 (60 left
    each: 180); 200 results of 700, each 100 tokens; both at 100 tokens/s; b's report at ``b_at``;
    both reports say ``lends``."""
    group = [
        GroupMember("a", "/127.0.0.1", {"p": [0, 1, 2, 3]}),
        GroupMember("b", "/127.0.0.1", {"p": [4, 5, 6]}),
    ]
    reports = {
        "a": _member("a", NOW - 100, NOW - 1, 10_000, tokens_per_s=100.0, lends=lends),
        "b": _member("b", NOW - 100, b_at, 10_000, tokens_per_s=100.0, lends=lends),
    }
    return Observation(
        run_id="r", at=NOW, prompts_topic_exists=True, completions_topic_exists=True, prompts_topic="p",
        completions_topic="c", errors_topic="e", prompts_end=dict.fromkeys(range(7), 100),
        generate_committed={p: 20 if p < 4 else 40 for p in range(7)}, completions_end={0: 200},
        published=700, generate_members=group, control=ControlState(members=reports),
    )  # fmt: skip


def test_the_finish_is_the_last_members_drain_of_its_own_partitions() -> None:
    """a has 320 results to come, b 180, 100 tokens each at 100 tokens/s a member: b idles after
    180 s while a works to 320 s; the fleet's rate over all (200 tokens/s for 50,000 tokens) said
    250 s."""
    p = shape(_run(b_at=NOW - 1)).projection
    assert p is not None and p.finish_at is not None
    assert math.isclose(p.finish_at.value, NOW + 320)
    assert drain_finish({"a": (0, 0.0)}, at=NOW, remaining=5, mean=1.0, var=0.0, n=1) is None
    # b's report is stale (its server or process gone): no rate for its backlog, the fleet's rate
    stale = shape(_run(b_at=NOW - 60)).projection
    assert stale is not None and stale.finish_at is not None
    assert math.isclose(stale.finish_at.value, NOW + 500)  # 50,000 tokens at a's 100 tokens/s


def test_members_that_lend_drain_as_one_fleet() -> None:
    """The same uneven run with lending on (the default): b's server takes a's backlog once its
    own partitions are done, so the finish is the fleet's 200 tokens/s over the 50,000 tokens to
    come, 250 s, where a's own drain said 320 s; the report carries each consumer's ``lend``."""
    p = shape(_run(b_at=NOW - 1, lends=True)).projection
    assert p is not None and p.finish_at is not None
    assert math.isclose(p.finish_at.value, NOW + 250)
    assert _gate().report().lends is Settings().consumer.lend is True
    assert _gate(Settings(run_id="r", consumer={"lend": False})).report().lends is False
