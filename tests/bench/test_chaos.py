"""The chaos audit's pure parts, in milliseconds: the seeded schedule, the input file's plan, and
each audit check against a clean run and a run with one crafted violation."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from bench.chaos import summary
from bench.chaos.audit import AuditData, ObjectSpan, Result, Sample, audit
from bench.chaos.inputs import write_inputs
from bench.chaos.monitor import Monitor, instance_of
from bench.chaos.schedule import KINDS, MAX_HOLD_SHARE, Shape, make_schedule
from streams.config import Settings

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
    with pytest.raises(ValueError, match="at least 1 fault"):
        make_schedule(1, 0, window_s=60, publish_s=30, shape=Shape())


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
PROMPTS = "run.prompts"


def _clean() -> AuditData:
    """Two partitions of 4 prompts each, all done at T0 + 1, stored at T0 + 2, committed after."""
    prompts = [(p, o, f"c-{p}{o}") for p in (0, 1) for o in range(4)]
    results = [Result("completion", p, o, (p, o), i, int((T0 + 1) * 1000)) for p, o, i in prompts]
    objects = [
        ObjectSpan(f"completions+{p}+{s}", "run.completions", p, s, s + 1, (s, s + 1), T0 + 2)
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
        topic_offsets={("run.completions", p): [0, 1, 2, 3] for p in (0, 1)},
        objects=objects,
        generate_samples=[Sample(T0 + 1.5, {(PROMPTS, 0): 4, (PROMPTS, 1): 4})],
        sink_samples=[Sample(T0 + 3, {("run.completions", 0): 4, ("run.completions", 1): 4})],
        dataset_completions=Counter(i for _, _, i in prompts),
        dataset_errors={},
        export_status=0,
        handovers={0: 0, 1: 0},
        max_uncommitted=2,
        prompts_topic=PROMPTS,
    )


def _failed(data: AuditData) -> dict[str, list[str]]:
    return {c.name: c.violations for c in audit(data) if not c.ok}


def test_a_clean_run_passes_every_check() -> None:
    assert _failed(_clean()) == {}


def test_a_gap_in_s3_is_found() -> None:
    d = _clean()
    d.objects = [o for o in d.objects if o.key != "completions+1+2"]
    failed = _failed(d)
    assert "s3_contiguous" in failed and "records 2..3" in failed["s3_contiguous"][0]
    assert "sink_commits_durable" in failed  # the commit passed records that are in no object


def test_an_overlap_in_s3_is_found() -> None:
    d = _clean()
    d.objects.append(ObjectSpan("completions+0+1", "run.completions", 0, 1, 2, (1, 2), T0 + 2))
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


def test_a_commit_past_a_result_written_later_is_found() -> None:
    d = _clean()
    d.generate_samples.insert(0, Sample(T0 + 0.5, {(PROMPTS, 1): 3}))  # results came at T0 + 1
    violations = _failed(d)["generate_commits_durable"]
    assert len(violations) == 3 and "offset 0 came +0.500 s after" in violations[0]


def test_a_commit_past_a_prompt_without_any_result_is_found() -> None:
    d = _clean()
    d.results = [r for r in d.results if r.source != (0, 2)]
    assert "offset 2 came never" in _failed(d)["generate_commits_durable"][0]


def test_a_sink_commit_before_the_object_existed_is_found() -> None:
    d = _clean()
    d.sink_samples.insert(0, Sample(T0 + 1, {("run.completions", 0): 2}))
    assert "stored +1 s after" in _failed(d)["sink_commits_durable"][0]


def test_duplicates_over_the_bound_are_found_and_within_it_pass() -> None:
    d = _clean()
    extra = [Result("completion", 0, 10 + i, (1, i % 2), f"c-1{i % 2}", int(T0 * 1000)) for i in range(3)]
    d.results += extra
    assert "partition 1: 3 duplicate generations, bound 0" in _failed(d)["duplicates_within_bound"][0]
    d.handovers[1] = 2  # bound 2 x max_uncommitted 2 = 4
    assert "duplicates_within_bound" not in _failed(d)


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


def test_run_problems_fail_the_recovery_check() -> None:
    d = _clean()
    d.run_problems = ["generate-1 exited on its own with status 3"]
    assert _failed(d) == {"pipeline_recovered": ["generate-1 exited on its own with status 3"]}


def _report(seed: int, ok: bool) -> dict[str, object]:
    return {
        "seed": seed,
        "prompts": 100,
        "wall_s": 12.3,
        "ok": ok,
        "max_uncommitted": 32,
        "faults": [{"kind": "sink_kill", "ok": True}, {"kind": "broker_kill", "ok": ok}],
        "checks": [{"name": "exactly_once", "ok": ok}],
        "stats": {"duplicates": 3, "handovers": {"0": 1, "1": 2}},
    }


def test_the_summary_tabulates_runs_and_fault_kinds_and_fails_on_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_report(1, True)))
    bad.write_text(json.dumps(_report(2, False)))
    assert summary.main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 2 | 100 | 1/1 | 3 (96) | 12 | PASS |" in out
    assert "| broker_kill | 1 | 1 |" in out and "1 runs, 2 faults, 1/1 runs passed" in out
    assert summary.main([str(good), str(bad)]) == 1
    assert "| broker_kill | 2 | 1 |" in capsys.readouterr().out
    (tmp_path / "junk.json").write_text("{")
    assert summary.main([str(tmp_path / "junk.json")]) == 2
    assert "junk.json: cannot read the report" in capsys.readouterr().err
