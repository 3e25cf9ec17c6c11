"""The chaos audit's pure parts, in milliseconds: the seeded schedule, the input file's plan, and
each audit check against a clean run and a run with one crafted violation."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from bench.chaos import summary
from bench.chaos.audit import AuditData, ObjectSpan, Result, Sample, audit, harness_check
from bench.chaos.inputs import write_inputs
from bench.chaos.monitor import Monitor, instance_of
from bench.chaos.schedule import (
    KINDS,
    LONG_KAFKA_DOWN_S,
    LONG_S3_DOWN_S,
    MAX_HOLD_SHARE,
    OVERLAP_KINDS,
    SETTLE_S,
    Shape,
    holds,
    make_schedule,
)
from bench.chaos.trace import Cause, ProcessTrace, duplicate_causes, read_traces
from streams.audit_trace import AuditTrace
from streams.config import Settings
from streams.errors import ConfigError

# -- the schedule -----------------------------------------------------------------------------------


def test_the_schedule_is_a_function_of_the_seed() -> None:
    a = make_schedule(7, 11, window_s=200, publish_s=120, shape=Shape())
    assert a == make_schedule(7, 11, window_s=200, publish_s=120, shape=Shape())
    assert a != make_schedule(8, 11, window_s=200, publish_s=120, shape=Shape())


def test_every_kind_appears_across_seeds_and_in_one_schedule_of_as_many_faults() -> None:
    seen = {
        f.kind
        for seed in range(20)
        for f in make_schedule(seed, 8, window_s=120, publish_s=72, shape=Shape())
    }
    assert seen == set(KINDS)
    for seed in range(20):
        assert {
            f.kind for f in make_schedule(seed, len(KINDS), window_s=200, publish_s=120, shape=Shape())
        } == set(KINDS)


@pytest.mark.parametrize("seed", range(30))
def test_faults_are_spaced_and_each_is_undone_before_the_next_starts(seed: int) -> None:
    window, n = 120.0, 8
    faults = make_schedule(seed, n, window_s=window, publish_s=72, shape=Shape())
    slot = window / n
    assert [f.index for f in faults] == list(range(n))
    for f, nxt in itertools.pairwise(faults):
        assert nxt.at_s - f.at_s >= 0.75 * slot - 0.01
        assert f.end_s <= f.index * slot + MAX_HOLD_SHARE * slot + 0.01 < nxt.at_s
        assert f.hold_s > 0
    assert faults[-1].end_s <= window


@pytest.mark.parametrize("seed", range(30))
def test_targets_exist_and_producer_kills_fall_while_it_publishes(seed: int) -> None:
    shape = Shape(consumers=3, servers=3, brokers=3, partitions=7)
    for f in make_schedule(seed, 11, window_s=200, publish_s=120, shape=shape):
        if f.kind == "producer_kill":
            assert f.target == "producer" and f.at_s < 0.8 * 120
        elif f.kind in ("consumer_kill", "consumer_stop"):
            assert f.target in {"generate-0", "generate-1", "generate-2"}
        elif f.kind == "scale_out":
            assert shape.consumers + f.params["extra"] > shape.partitions
        elif f.kind == "broker_kill":
            assert f.target in {"kafka-1", "kafka-2", "kafka-3"}
        elif f.kind == "s3_down":
            assert f.target == "s3" and f.hold_s <= 60
        elif f.kind.startswith("server_"):
            assert f.target in {"sim-0", "sim-1", "sim-2"}


def test_a_window_too_short_for_the_faults_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        make_schedule(1, 20, window_s=60, publish_s=30, shape=Shape())
    with pytest.raises(ValueError, match="0 faults or more"):
        make_schedule(1, -1, window_s=60, publish_s=30, shape=Shape())
    assert make_schedule(1, 0, window_s=60, publish_s=30, shape=Shape()) == []


@pytest.mark.parametrize("seed", range(20))
def test_an_overlapping_schedule_overlaps_but_never_holds_one_target_twice(seed: int) -> None:
    faults = make_schedule(seed, 200, window_s=1600, publish_s=960, shape=Shape(), overlap=True)
    assert faults == make_schedule(seed, 200, window_s=1600, publish_s=960, shape=Shape(), overlap=True)
    assert len(faults) >= 190 and [f.index for f in faults] == list(range(len(faults)))
    assert {f.kind for f in faults} == set(OVERLAP_KINDS)
    overlapping = 0
    for a, b in itertools.combinations(faults, 2):
        if a.at_s < b.end_s + 2.0 and b.at_s < a.end_s + 2.0:  # on at once (2 s to settle at least)
            overlapping += 1
            assert not holds(a) & holds(b), (a, b)
    assert overlapping >= 50
    for a, b in itertools.pairwise(sorted((f for f in faults if "broker" in holds(f)), key=lambda f: f.at_s)):
        assert b.at_s >= a.end_s + SETTLE_S[a.kind] - 0.01  # a broker is ready again before the next goes
    assert all(f.end_s <= 1600.01 for f in faults)
    assert all(f.hold_s >= LONG_KAFKA_DOWN_S for f in faults if f.kind == "kafka_down")
    assert next(f for f in faults if f.kind == "s3_down").hold_s == LONG_S3_DOWN_S
    for f in faults:
        if f.kind == "broker_consumer_kill":
            assert f.target in {"kafka-1", "kafka-2", "kafka-3"} and f.params["consumer"] in (0, 1, 2)


# -- the input file ---------------------------------------------------------------------------------


def test_the_input_plan_matches_the_file(tmp_path: Path) -> None:
    plan = write_inputs(tmp_path / "in.jsonl", 50, 3, max_message_bytes=256 * 1024, context_tokens=8192)
    lines = (tmp_path / "in.jsonl").read_bytes().split(b"\n")[:-1]
    assert len(lines) == plan.lines == 50 + 2 + len(plan.bad)
    assert Counter(plan.bad.values()) == {"invalid_json": 2, "not_utf8": 2, "too_large": 2, "duplicate_id": 2}
    ids = []
    for number, line in enumerate(lines, start=1):
        kind = plan.bad.get(number)
        if kind == "not_utf8":
            with pytest.raises(UnicodeDecodeError):
                line.decode()
        elif kind == "invalid_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(line)
        elif kind == "too_large":
            assert len(line) > 256 * 1024
        else:
            ids.append(json.loads(line)["id"])
            if kind is None:
                assert json.loads(line)["id"] in plan.valid
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert len(duplicates) == 2 and set(duplicates) <= plan.valid
    assert len(plan.valid) == 52 and plan.over_context <= plan.valid
    assert plan == write_inputs(
        tmp_path / "in.jsonl", 50, 3, max_message_bytes=256 * 1024, context_tokens=8192
    )


# -- ownership from group descriptions --------------------------------------------------------------


def test_handovers_count_owner_changes_between_stable_samples_only() -> None:
    monitor = Monitor(Settings())
    uid = "-0b3c1d2e-1111-2222-3333-444455556666"
    assert instance_of("run-generate-0" + uid) == "run-generate-0"
    monitor.observe_members("Stable", {"a" + uid: {0, 1}, "b" + uid: {2}})
    monitor.observe_members("PreparingRebalance", {"a" + uid: set(), "b" + uid: set()})
    monitor.observe_members("Stable", {"a" + uid: {0}, "b" + uid: {1, 2}})
    assert monitor.owned_by("b") == [1, 2]
    assert monitor.handovers[0] == 0 and monitor.handovers[1] == 1 and monitor.handovers[2] == 0


# -- the audit checks -------------------------------------------------------------------------------

T0 = 1_700_000_000.0
M0 = 5_000.0
"""The traces' monotonic clock at wall time T0."""
PROMPTS = "run.prompts"
COMPLETIONS = "run.completions"


def _consumer_trace(pid: int = 100) -> ProcessTrace:
    """A consumer that owns both partitions, writes 4 results each (acked at M0 + 1), commits at
    M0 + 1.5."""
    events: list[dict[str, object]] = [{"t": M0, "e": "assigned", "parts": [0, 1]}]
    for p in (0, 1):
        for o in range(4):
            events.append({"t": M0 + 0.5, "e": "send", "src": [p, o]})
            events.append({"t": M0 + 1.0, "e": "ack", "src": [p, o], "to": [COMPLETIONS, p, o]})
    events.append({"t": M0 + 1.5, "e": "commit", "offsets": {"0": 4, "1": 4}})
    events.append({"t": M0 + 1.6, "e": "committed", "offsets": {"0": 4, "1": 4}})
    return ProcessTrace("generate", pid, events)


def _sink_trace(pid: int = 200) -> ProcessTrace:
    """The sink: objects 0..1 and 2..3 of each partition uploaded at M0 + 2, committed at M0 + 3."""
    events: list[dict[str, object]] = [
        {"t": M0 + 2.0, "e": "put", "tp": [COMPLETIONS, p], "span": [s, s + 1]}
        for p in (0, 1)
        for s in (0, 2)
    ]
    events += [{"t": M0 + 3.0, "e": "commit", "tp": [COMPLETIONS, p], "offset": 4} for p in (0, 1)]
    return ProcessTrace("sink", pid, events)


def _clean() -> AuditData:
    """Two partitions of 4 prompts each, acked at M0 + 1, committed at M0 + 1.5, stored at M0 + 2
    (S3's LastModified T0 + 2), the sink's commits at M0 + 3."""
    prompts = [(p, o, f"c-{p}{o}") for p in (0, 1) for o in range(4)]
    results = [
        Result("completion", p, o, (p, o), i, int((T0 + 1) * 1000), COMPLETIONS) for p, o, i in prompts
    ]
    objects = [
        ObjectSpan(f"completions+{p}+{s}", COMPLETIONS, p, s, s + 1, (s, s + 1), T0 + 2)
        for p in (0, 1)
        for s in (0, 2)
    ]
    return AuditData(
        input_name="in.jsonl",
        valid_ids={i for _, _, i in prompts},
        over_context_ids=set(),
        bad_lines={3: "invalid_json"},
        bad_report=[{"file": "in.jsonl", "line": 3, "reason": "invalid JSON"}],
        prompts=prompts,
        results=results,
        topic_offsets={(COMPLETIONS, p): [0, 1, 2, 3] for p in (0, 1)},
        objects=objects,
        generate_samples=[Sample(T0 + 1.7, {(PROMPTS, 0): 4, (PROMPTS, 1): 4})],
        sink_samples=[Sample(T0 + 3.1, {(COMPLETIONS, 0): 4, (COMPLETIONS, 1): 4})],
        dataset_completions=Counter(i for _, _, i in prompts),
        dataset_errors={},
        export_status=0,
        max_uncommitted=2,
        prompts_topic=PROMPTS,
        traces=[_consumer_trace(), _sink_trace()],
        wall_minus_mono_s=T0 - M0,
    )


def _failed(data: AuditData) -> dict[str, list[str]]:
    return {c.name: c.violations for c in audit(data) if not c.ok}


def test_a_clean_run_passes_every_check() -> None:
    checks = audit(_clean())
    assert _failed(_clean()) == {}
    assert [c.name for c in checks][-1] == "harness_on_time" and harness_check("harness_on_time")
    assert not any(harness_check(c.name) for c in checks[:-1])


def test_a_gap_in_s3_is_found() -> None:
    d = _clean()
    d.objects = [o for o in d.objects if o.key != "completions+1+2"]
    d.traces[1].events = [e for e in d.traces[1].events if e.get("span") != [2, 3] or e["tp"][1] != 1]
    failed = _failed(d)
    assert "s3_contiguous" in failed and "records 2..3" in failed["s3_contiguous"][0]
    assert "offset 2 was in no object" in failed["sink_commits_durable"][0]


def test_an_overlap_in_s3_is_found() -> None:
    d = _clean()
    d.objects.append(ObjectSpan("completions+0+1", COMPLETIONS, 0, 1, 2, (1, 2), T0 + 2))
    assert "overlapping" in " ".join(_failed(d)["s3_contiguous"])


def test_an_object_whose_lines_disagree_with_its_key_is_found() -> None:
    d = _clean()
    d.objects[0] = dataclasses.replace(d.objects[0], offsets=(0,))
    assert "metadata ends at 1" in _failed(d)["s3_contiguous"][0]


def test_a_missing_id_is_found() -> None:
    d = _clean()
    del d.dataset_completions["c-12"]
    assert _failed(d) == {"dataset_exactly_once": ["id c-12 is missing from the dataset"]}


def test_an_id_twice_in_the_dataset_or_an_unreasoned_error_is_found() -> None:
    d = _clean()
    d.dataset_errors = {"c-00": [""]}
    assert set(_failed(d)["dataset_exactly_once"]) == {
        "error of c-00 has no reason",
        "id c-00 is 2 times in the dataset",
    }


def test_a_commit_sent_after_the_send_but_before_the_ack_is_found() -> None:
    """What the sampled check could never see: the record was sent (its Kafka timestamp is
    earlier), the commit went out before the acknowledgement."""
    d = _clean()
    d.traces[0].events.insert(-2, {"t": M0 + 0.7, "e": "commit", "offsets": {"1": 3}})
    violations = _failed(d)["generate_commits_durable"]
    assert violations == [
        "pid 100 committed 3 on partition 1, but the result of offset 0 was acknowledged +0.300 s later"
    ]


def test_a_commit_past_a_prompt_without_any_result_is_found() -> None:
    d = _clean()
    d.traces[0].events = [e for e in d.traces[0].events if not (e["e"] == "ack" and e["src"] == [0, 2])]
    assert _failed(d)["generate_commits_durable"] == [
        "pid 100 committed 4 on partition 0, but the result of offset 2 was never acknowledged"
    ]


def test_a_committed_offset_no_traced_commit_sent_or_no_trace_at_all_is_found() -> None:
    d = _clean()
    d.generate_samples.append(Sample(T0 + 5, {(PROMPTS, 0): 3}))
    assert _failed(d)["generate_commits_durable"] == [
        f"{PROMPTS}-0 was committed at 3 (sampled at {T0 + 5:.3f}) by no traced commit"
    ]
    d = _clean()
    d.traces = []
    failed = _failed(d)
    assert failed["generate_commits_durable"][0].startswith("no consumer traced a commit")
    assert failed["sink_commits_durable"][0] == "the sink traced no commit: the audit has nothing to judge"


def test_a_sink_commit_before_its_upload_returned_is_found() -> None:
    d = _clean()
    d.traces[1].events.insert(0, {"t": M0 + 1.5, "e": "commit", "tp": [COMPLETIONS, 0], "offset": 2})
    assert _failed(d)["sink_commits_durable"] == [
        f"pid 200 committed 2 on {COMPLETIONS}-0, but offset 0 was stored +0.500 s later"
    ]


def test_an_object_no_trace_saw_is_dated_by_last_modified_plus_a_second() -> None:
    """S3 keeps whole seconds: an object the sink was killed before tracing counts from its
    LastModified + 1 s, never earlier."""
    d = _clean()
    d.traces[1].events = [e for e in d.traces[1].events if e.get("span") != [2, 3] or e["tp"][1] != 0]
    assert _failed(d) == {}  # LastModified T0 + 2 -> M0 + 3: the commit at M0 + 3 is not ahead
    d.objects[1] = dataclasses.replace(d.objects[1], last_modified_s=T0 + 2.5)
    assert _failed(d)["sink_commits_durable"] == [
        f"pid 200 committed 4 on {COMPLETIONS}-0, but offset 2 was stored +0.500 s later"
    ]


def _duplicate(
    d: AuditData, source: tuple[int, int], at: int, acked: tuple[ProcessTrace, float] | None = None
) -> None:
    """One more result of ``source`` at offset ``at`` of the completions topic; ``acked``: the
    consumer whose trace acknowledges it, and when."""
    d.results.append(Result("completion", source[0], at, source, f"c-{source[0]}{source[1]}", 0, COMPLETIONS))
    if acked is not None:
        trace, t = acked
        trace.events.append({"t": t, "e": "ack", "src": list(source), "to": [COMPLETIONS, source[0], at]})


def test_a_duplicate_without_a_cause_is_found() -> None:
    d = _clean()
    _duplicate(d, (1, 2), 10)
    assert _failed(d)["duplicates_within_bound"] == [
        f"prompt 1:2 (c-12) has 2 results; without a cause: {COMPLETIONS}-1@10 (acknowledged in no trace); "
        "causes in the traces: none"
    ]


def test_a_duplicate_after_a_handover_with_the_prompt_uncommitted_passes() -> None:
    """pid 300 wrote prompt 1:2 and was SIGKILLed (its trace stops) before committing: the
    consumer behind it generated 1:2 again."""
    d = _clean()
    d.traces.append(
        ProcessTrace(
            "generate",
            300,
            [
                {"t": M0 - 1, "e": "assigned", "parts": [1]},
                {"t": M0 - 0.9, "e": "send", "src": [1, 2]},
            ],
        )
    )
    _duplicate(d, (1, 2), 10)
    assert _failed(d) == {}
    _duplicate(d, (1, 2), 11)  # a third result: one cause explains one duplicate, not two
    assert _failed(d)["duplicates_within_bound"] == [
        f"prompt 1:2 (c-12) has 3 results; without a cause: {COMPLETIONS}-1@11 (acknowledged in no trace); "
        f"causes in the traces: ended of pid 300 at {M0 - 0.9:.3f}"
    ]


def _with_writer_300(d: AuditData, *after_send: dict[str, object]) -> AuditData:
    """``d`` with consumer pid 300 that wrote prompt 1:2 (not acknowledged in its trace), then
    ``after_send``, and a second result of 1:2 on the topic."""
    d.traces.append(ProcessTrace("generate", 300, [{"t": M0 - 1, "e": "send", "src": [1, 2]}, *after_send]))
    _duplicate(d, (1, 2), 10)
    return d


def test_an_unacknowledged_copy_after_a_consumer_left_with_it_in_flight_passes() -> None:
    """A consumer whose server went down leaves the group and cancels its writes; one already in
    the producer's hands lands without its acknowledgement being traced."""
    d = _with_writer_300(_clean(), {"t": M0 - 0.8, "e": "left"})
    assert _failed(d) == {}


def test_a_prompt_committed_before_its_writer_lost_the_partition_is_no_cause() -> None:
    d = _with_writer_300(
        _clean(),
        {"t": M0 - 0.8, "e": "committed", "offsets": {"1": 3}},
        {"t": M0 - 0.5, "e": "revoked", "parts": [1]},
    )
    assert "causes in the traces: none" in _failed(d)["duplicates_within_bound"][0]


def test_a_result_written_twice_by_one_consumer_without_losing_the_partition_is_found() -> None:
    """A revoke before the first write is no excuse for the second: the writer kept the result
    (a finished orphan it adopts), so writing it again is a re-send without a handover."""
    d = _clean()
    trace = ProcessTrace(
        "generate",
        300,
        [
            {"t": M0 - 3, "e": "send", "src": [1, 2]},
            {"t": M0 - 2.5, "e": "revoked", "parts": [1]},
            {"t": M0 - 2.4, "e": "ack", "src": [1, 2], "to": [COMPLETIONS, 1, 10]},
            {"t": M0 - 2.0, "e": "assigned", "parts": [1]},
            {"t": M0 - 1.9, "e": "send", "src": [1, 2]},
        ],
    )
    d.traces.append(trace)
    d.results.append(Result("completion", 1, 10, (1, 2), "c-12", 0, COMPLETIONS))
    _duplicate(d, (1, 2), 11, acked=(trace, M0 - 1.8))
    violation = _failed(d)["duplicates_within_bound"][0]
    assert f"without a cause: {COMPLETIONS}-1@11 (pid 300, acknowledged at {M0 - 1.8:.3f})" in violation
    # Written and acknowledged before the revoke (uncommitted), then generated again: a cause.
    trace.events[1:3] = [trace.events[2], trace.events[1]]
    trace.events[1]["t"], trace.events[2]["t"] = M0 - 2.9, M0 - 2.5
    assert "duplicates_within_bound" not in _failed(d)


def test_a_retry_excuses_only_a_result_no_trace_acknowledged() -> None:
    """A retried write explains a landed-but-unacknowledged copy, never a second acknowledged one."""
    d = _clean()
    d.traces[0].events.insert(3, {"t": M0 + 0.6, "e": "retry", "src": [0, 1]})
    _duplicate(d, (0, 1), 10, acked=(d.traces[0], M0 + 1.2))
    assert "(pid 100, acknowledged at" in _failed(d)["duplicates_within_bound"][0]


def test_one_handover_causing_more_than_max_uncommitted_duplicates_is_found() -> None:
    d = _clean()
    sends = [{"t": M0 - 1, "e": "send", "src": [0, o]} for o in range(3)]
    trace = ProcessTrace("generate", 300, sends)
    d.traces.append(trace)
    for o in range(3):  # written and acknowledged by pid 300, which left before committing them
        _duplicate(d, (0, o), 10 + o, acked=(trace, M0 - 0.9))
    trace.events.append({"t": M0 - 0.5, "e": "left"})
    assert _failed(d)["duplicates_within_bound"] == [
        f"pid 300 gave up partition 0 at {M0 - 0.5:.3f} and 3 of its prompts were generated again, over "
        "max_uncommitted 2"
    ]


def test_a_retried_write_explains_one_duplicate() -> None:
    d = _clean()
    d.traces[0].events.insert(3, {"t": M0 + 0.6, "e": "retry", "src": [0, 1]})
    _duplicate(d, (0, 1), 10)
    checks = {c.name: c for c in audit(d)}
    assert checks["duplicates_within_bound"].ok
    assert "1 from retried writes" in checks["duplicates_within_bound"].detail


def test_a_partition_moved_by_an_assignment_without_it_is_a_handover() -> None:
    trace = ProcessTrace(
        "generate",
        7,
        [
            {"t": 1.0, "e": "assigned", "parts": [0, 1]},
            {"t": 2.0, "e": "send", "src": [0, 5]},
            {"t": 2.0, "e": "send", "src": [1, 5]},
            {"t": 3.0, "e": "assigned", "parts": [1]},
            {"t": 4.0, "e": "committed", "offsets": {"1": 6}},
        ],
    )
    causes = duplicate_causes([trace])
    assert causes.by_source == {(0, 5): [Cause("handover", "7.0", 7, 3.0, "moved")]}
    assert causes.in_flight == {("7.0", 0, 3.0): 1}


def test_the_raw_topics_must_hold_every_valid_id_and_over_context_ids_as_errors() -> None:
    d = _clean()
    d.results = [r for r in d.results if r.id != "c-03"]
    d.over_context_ids = {"c-10"}
    failed = _failed(d)
    assert failed["topics_cover_every_prompt"] == [
        "id c-03 has no result on the topics",
        "over-context id c-10 has no error record",
    ]


def test_a_torn_last_trace_line_is_dropped_and_a_torn_earlier_one_refused(tmp_path: Path) -> None:
    (tmp_path / "generate-12-99.jsonl").write_text('{"t": 1, "e": "left"}\n{"t": 2, "e": "se')
    [trace] = read_traces(tmp_path)
    assert (trace.role, trace.pid, trace.key, trace.events) == (
        "generate",
        12,
        "12.99",
        [{"t": 1, "e": "left"}],
    )
    (tmp_path / "sink-13-5.jsonl").write_text('{"t": 1, "e\n{"t": 2, "e": "left"}\n')
    with pytest.raises(ValueError, match=r"sink-13-5\.jsonl:1: not a trace event"):
        read_traces(tmp_path)


def test_the_product_traces_events_and_refuses_an_unknown_plant(tmp_path: Path) -> None:
    trace = AuditTrace(str(tmp_path), "sink", frozenset({"resend"}))
    again = AuditTrace(str(tmp_path), "sink")  # the same pid (reused): a file of its own
    trace.event("put", tp=["t", 0], span=[0, 9])
    again.event("left")
    files = sorted(tmp_path.glob(f"sink-{os.getpid()}-*.jsonl"))
    assert len(files) == 2
    [line] = next(f for f in files if "put" in f.read_text()).read_text().splitlines()
    assert json.loads(line)["span"] == [0, 9]
    assert trace.planted("resend") and not trace.planted("commit_before_ack")
    off = AuditTrace(None, "sink")
    off.event("put")
    assert not off.on
    with pytest.raises(ConfigError, match="unknown commit_late"):
        AuditTrace(None, "sink", frozenset({"commit_late"}))
    with pytest.raises(ConfigError, match="without KAFKAGEN_AUDIT_TRACE"):
        AuditTrace(None, "sink", frozenset({"resend"}))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="cannot write the audit trace"):
        AuditTrace(str(tmp_path / "a-file" / "trace"), "sink")  # a folder under a file


def test_a_prompt_a_recovering_consumer_found_answered_is_durable_from_then() -> None:
    """A consumer that lost its committed offsets skips prompts whose result it read in Kafka
    (consumers/positions/recovery.py) and commits past them: reading it there is the evidence."""
    d = _clean()
    d.traces[0].events = [e for e in d.traces[0].events if not (e["e"] == "ack" and e["src"] == [0, 2])]
    d.traces[0].events.insert(1, {"t": M0 + 0.2, "e": "answered", "src": [0, 2]})
    assert _failed(d) == {}


def test_bad_lines_missing_from_the_report_or_valid_lines_in_it_are_found() -> None:
    d = _clean()
    d.bad_report = [{"file": "in.jsonl", "line": 4, "reason": "duplicate id"}]
    assert set(_failed(d)["producer_bad_lines"]) == {
        "line 3 (invalid_json) is not in the bad-lines report",
        "line 4 reported bad but is valid: duplicate id",
    }


def test_a_prompt_published_twice_is_found() -> None:
    d = _clean()
    d.prompts.append((1, 9, "c-00"))
    assert _failed(d)["prompts_exactly_once"] == ["id c-00 published 2 times"]


def test_product_and_harness_problems_fail_separate_checks() -> None:
    d = _clean()
    d.run_problems = ["generate-1 exited on its own with status 3"]
    assert _failed(d) == {"pipeline_recovered": ["generate-1 exited on its own with status 3"]}
    d = _clean()
    d.harness_problems = ["fault 3 (broker_kill kafka-2) injected 14.0 s late"]
    assert _failed(d) == {"harness_on_time": ["fault 3 (broker_kill kafka-2) injected 14.0 s late"]}


def _report(seed: int, ok: bool) -> dict[str, object]:
    return {
        "seed": seed,
        "prompts": 100,
        "wall_s": 12.3,
        "ok": ok,
        "max_uncommitted": 32,
        "faults": [{"kind": "sink_kill", "ok": True}, {"kind": "broker_kill", "ok": ok}],
        "overlap": True,
        "harness_ok": ok,
        "checks": [{"name": "dataset_exactly_once", "ok": ok}, {"name": "harness_on_time", "ok": ok}],
        "stats": {"duplicates": 3},
    }


def test_the_summary_tabulates_runs_and_fault_kinds_and_fails_on_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_report(1, True)))
    bad.write_text(json.dumps(_report(2, False)))
    assert summary.main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 2 | yes | 100 | 1/1 | 3 | PASS | 12 | PASS |" in out
    assert "| broker_kill | 1 | 1 |" in out and "1 runs, 2 faults, 1/1 runs passed" in out
    assert summary.main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "| broker_kill | 2 | 1 |" in out and "| 2 | 2 | yes | 100 | 0/1 | 3 | FAIL | 12 | FAIL |" in out
    (tmp_path / "junk.json").write_text("{")
    assert summary.main([str(tmp_path / "junk.json")]) == 2
    assert "junk.json: cannot read the report" in capsys.readouterr().err


# -- the drain: slow is not stuck (bench.chaos.__main__.wait_while_progressing) --------------------


class _Drain:
    """A pipeline whose commits advance by ``step`` per poll until ``end`` (``step`` 0: stuck)."""

    def __init__(self, step: int, end: int) -> None:
        self.offsets, self.step, self.end = 0, step, end

    async def done(self) -> bool:
        self.offsets = min(self.end, self.offsets + self.step)
        return self.offsets >= self.end

    def progress(self) -> int:
        return self.offsets


@pytest.mark.parametrize(
    ("step", "end", "stall_s", "cap_s", "verdict"),
    [
        pytest.param(1, 40, 0.05, 10.0, None, id="slow-but-advancing-drains-past-the-stall-time"),
        pytest.param(0, 40, 0.05, 10.0, "no commit advanced", id="stuck-fails-after-the-stall-time"),
        pytest.param(1, 10**9, 0.05, 0.1, "still draining", id="advancing-forever-stops-at-the-cap"),
    ],
)
async def test_the_drain_waits_while_commits_advance_and_fails_on_a_stall(
    step: int, end: int, stall_s: float, cap_s: float, verdict: str | None
) -> None:
    from bench.chaos.__main__ import wait_while_progressing

    drain = _Drain(step, end)
    outcome = await wait_while_progressing(
        drain.done, drain.progress, stall_s=stall_s, cap_s=cap_s, interval_s=0.01
    )
    if verdict is None:
        assert outcome is None and drain.offsets == end  # 40 polls: far past the 0.05 s stall time
    else:
        assert outcome is not None and verdict in outcome


@pytest.mark.parametrize(
    ("spawned_in_outage", "outage_over", "status", "product", "outage_exit"),
    [
        pytest.param(True, False, 3, False, True, id="started-in-the-outage-exit-3-is-its-answer"),
        pytest.param(False, False, 3, True, False, id="started-before-the-outage-exit-3-is-a-problem"),
        pytest.param(True, True, 3, True, False, id="outage-over-exit-3-is-a-problem"),
        pytest.param(True, False, 1, True, False, id="started-in-the-outage-exit-1-is-a-problem"),
    ],
)
def test_a_sigterm_exit_3_is_excused_only_for_a_process_started_in_a_kafka_outage(
    tmp_path: Path, spawned_in_outage: bool, outage_over: bool, status: int, product: bool, outage_exit: bool
) -> None:
    import time

    from bench.chaos.pipeline import Pipeline

    pipeline = Pipeline(Settings(), tmp_path, tmp_path / "in.jsonl", consumers=1, time_scale=1.0)
    now = time.monotonic()
    pipeline.kafka_down_since = now - 10.0
    pipeline.kafka_down_until = now - 1.0 if outage_over else float("inf")
    pipeline.spawned["generate-0"] = now - (5.0 if spawned_in_outage else 60.0)
    problem, harness = pipeline.sigterm_problem("generate-0", status, sent_at=now)
    assert (problem is not None) == product and harness is None
    assert (len(pipeline.outage_exits) == 1) == outage_exit
