"""The runs listing, shaped from what a collection read (:mod:`launch.status.runs_shape`, pure) and shown
(:mod:`launch.status.runs_view`): runs found from topic names, the run-id filter, a replay's prompts
topic and parent with and without a run record, the state rule and its order, the fields of a
row, the document's keys, and the table. The same on the real Kafka and S3:
``tests/launch/test_runs.py``."""

from __future__ import annotations

import io
import json

from rich.console import Console

from launch.status.runs_cli import plain_text
from launch.status.runs_shape import (
    MIN_LIVE_S,
    LagSummary,
    RunFacts,
    RunsListing,
    live_seconds,
    order_rows,
    parent_of,
    resolve_prompts_topic,
    run_state,
    runs_of_topics,
    select_runs,
    shape_run,
)
from launch.status.runs_view import COLUMNS, runs_view
from launch.status.shape import PromptCounts
from streams.control import (
    ControlState,
    ExportReport,
    FleetRecord,
    GateRecord,
    MemberReport,
    RegenerateRecord,
    RunRecord,
)

NOW = 1_764_660_000.0
LIVE_S = live_seconds(1.0)


def _member(run_id: str = "a", *, at: float = NOW - 1.0, **kw: object) -> MemberReport:
    base: dict[str, object] = {
        "run_id": run_id,
        "instance": "gen-0",
        "incarnation": "x",
        "host": "h",
        "pid": 1,
        "server": "http://gpu-0:30000",
        "at": at,
    }
    return MemberReport(**{**base, **kw})  # type: ignore[arg-type]


def _record(run_id: str = "a", **kw: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": run_id,
        "created_at": NOW - 3600,
        "updated_at": NOW - 3000,
        "by": "run@host-1",
        "prompts_topic": f"{run_id}.prompts",
        "partitions": 2,
        "generation": {"model": "qwen3-8b", "max_tokens": 4096, "temperature": 0.6},
        "servers": ["http://gpu-0:30000", "http://gpu-1:30000"],
    }
    return RunRecord(**{**base, **kw})  # type: ignore[arg-type]


def _export(at: float = NOW - 60, run_id: str = "a") -> ExportReport:
    return ExportReport(
        run_id=run_id, at=at, ids=10, completions=9, errors=1, missing=0, duplicates_dropped=0,
        destination="/data/a", host="h",
    )  # fmt: skip


def _regenerate(at: float, digest: str = "d1", ids: int = 3) -> RegenerateRecord:
    return RegenerateRecord(
        run_id="a", digest=digest, where={"flag": "truncated"}, overrides={"max_tokens": 8192},
        ids=ids, attempts={"1": ids}, at=at, by="regenerate@h",
    )  # fmt: skip


def _control(*records: object) -> ControlState:
    state = ControlState()
    for record in records:
        state.apply(record)  # type: ignore[arg-type]
    return state


def _counts(published: int = 10, results: int = 10, *, exact: bool = True) -> PromptCounts:
    return PromptCounts(
        published=published, published_exact=exact, results=results, completions=results, errors=0,
        in_s3=results, exported=None, remaining=max(0, published - results),
    )  # fmt: skip


def _finished_facts(run_id: str = "a", **kw: object) -> RunFacts:
    """A run of 10 prompts on 2 partitions (12 offsets: 2 transaction markers), all committed by
    its group, 10 results all in S3."""
    base: dict[str, object] = {
        "run_id": run_id,
        "own_topics": frozenset({"prompts", "completions", "errors", "control"}),
        "prompts_topic": f"{run_id}.prompts",
        "prompts_end": {0: 6, 1: 6},
        "generate_committed": {0: 6, 1: 6},
        "completions_end": {0: 6, 1: 4},
        "errors_end": {},
        "sink_committed": {(f"{run_id}.completions", 0): 6, (f"{run_id}.completions", 1): 4},
        "published": 10,
        "first_record_at": NOW - 3500,
    }
    return RunFacts(**{**base, **kw})  # type: ignore[arg-type]


def test_runs_are_found_by_their_topic_names() -> None:
    topics = [
        "a.prompts", "a.completions", "a.errors", "a.control",
        "b.completions", "b.errors", "b.control",  # a replay: no prompts topic of its own
        "exp.v2.prompts",  # run ids may hold dots
        "kafkagen-producer-progress", "__consumer_offsets", "kafkagen-sink.a-__assignor-__leader",
        ".prompts", ".hidden.control", "prompts",  # no run id, or one that cannot name a run
    ]  # fmt: skip
    assert runs_of_topics(topics) == {
        "a": {"prompts", "completions", "errors", "control"},
        "b": {"completions", "errors", "control"},
        "exp.v2": {"prompts"},
    }


def test_the_filter_takes_run_ids_and_shell_patterns_and_names_what_matched_nothing() -> None:
    known = ["exp-1", "exp-2", "demo", "exp-10"]
    assert select_runs(known, []) == (["demo", "exp-1", "exp-10", "exp-2"], [])
    assert select_runs(known, ["demo"]) == (["demo"], [])
    assert select_runs(known, ["exp-?", "nope", "demo", "x*"]) == (["demo", "exp-1", "exp-2"], ["nope", "x*"])


def test_a_replays_prompts_topic_and_parent_with_and_without_a_run_record() -> None:
    replay = _record("b", parent="a", prompts_topic="a.prompts")
    assert resolve_prompts_topic("b", replay, False, []) == "a.prompts"
    assert parent_of("b", replay, "a.prompts") == "a"
    # without a record: its own prompts topic, else the one its generation group committed on
    assert resolve_prompts_topic("a", None, True, ["a.prompts"]) == "a.prompts"
    assert parent_of("a", None, "a.prompts") is None
    assert resolve_prompts_topic("b", None, False, ["a.prompts"]) == "a.prompts"
    assert parent_of("b", None, "a.prompts") == "a"
    assert resolve_prompts_topic("b", None, False, []) is None, "never committed: unknown"
    assert resolve_prompts_topic("b", None, False, ["a.prompts", "c.prompts"]) is None, "ambiguous"
    assert resolve_prompts_topic("b", None, False, ["other-topic"]) is None


def test_the_state_is_the_first_rule_that_holds() -> None:
    done = _counts()
    no_lag = LagSummary(0, 0)

    def state(
        control: ControlState, counts: PromptCounts | None = done, lag: LagSummary | None = no_lag
    ) -> str:
        return run_state(control, counts, lag, "a.prompts", at=NOW, live_s=LIVE_S)

    halted = GateRecord(run_id="a", state="halted", epoch=0, at=NOW - 5, by="gen-0", reason="r")
    resumed = GateRecord(run_id="a", state="resumed", epoch=1, at=NOW - 4, by="gate resume@h")
    # halted wins over live reports and over a finished export
    assert state(_control(_member(), halted, _export())) == "halted"
    assert state(_control(halted, resumed, _member())) == "running"
    # running: a live report, even with everything done and exported
    assert state(_control(_member(), _export())) == "running"
    assert state(_control(_member(at=NOW - MIN_LIVE_S + 1), _export())) == "running"
    # a stale or stopped member is not running
    assert state(_control(_member(at=NOW - MIN_LIVE_S - 1), _export())) == "done"
    assert state(_control(_member(state="stopped"), _export())) == "done"
    assert state(_control(_member(at=NOW - MIN_LIVE_S - 1))) == "idle", "generated, not exported"
    assert state(ControlState(), counts=None, lag=None) == "idle"


def test_done_needs_an_export_after_the_last_regeneration_and_nothing_remaining() -> None:
    exported = _control(_export(at=NOW - 60))

    def state(
        control: ControlState, counts: PromptCounts, lag: LagSummary, topic: str | None = "a.prompts"
    ) -> str:
        return run_state(control, counts, lag, topic, at=NOW, live_s=LIVE_S)

    assert state(exported, _counts(), LagSummary(0, 0)) == "done"
    assert state(exported, _counts(), LagSummary(1, 0)) == "idle", "a prompt not committed"
    assert state(exported, _counts(), LagSummary(0, 1)) == "idle", "a result not in S3"
    assert state(exported, _counts(10, 9), LagSummary(0, 0)) == "idle", "fewer results than published"
    # published read from end offsets (transaction markers count): the offsets decide
    assert state(exported, _counts(12, 10, exact=False), LagSummary(0, 0)) == "done"
    assert state(exported, _counts(), LagSummary(0, 0), topic=None) == "idle", "prompts topic unknown"
    regenerated = _control(_export(at=NOW - 60), _regenerate(at=NOW - 30))
    assert state(regenerated, _counts(), LagSummary(0, 0)) == "idle", "exported before the regeneration"
    again = _control(_regenerate(at=NOW - 30), _export(at=NOW - 10))
    assert state(again, _counts(), LagSummary(0, 0)) == "done"


def test_a_row_from_a_run_record_fleet_regenerations_and_export() -> None:
    control = _control(
        _record(),
        FleetRecord(run_id="a", servers=["http://gpu-2:30000"], version=1, at=NOW - 100, by="scale@h"),
        _regenerate(at=NOW - 200, digest="d1", ids=3),
        _regenerate(at=NOW - 150, digest="d2", ids=4),
        _member(at=NOW - 500, state="stopped", model="reported"),
        _export(at=NOW - 50),
    )
    # 3 prompts published by the producer, 7 re-published by the regenerations: 10 results
    row = shape_run(_finished_facts(control=control, s3_folder="runs/a/", published=3), at=NOW, live_s=LIVE_S)
    assert (row.run_id, row.state, row.parent, row.by) == ("a", "done", None, "run@host-1")
    assert (row.created_at, row.created_from) == (NOW - 3600, "run_record")
    assert row.last_activity_at == NOW - 50
    assert row.known_from == ["run_record", "topics", "s3"]
    assert (row.prompts_topic, row.partitions) == ("a.prompts", 2)
    assert row.params == {"model": "qwen3-8b", "max_tokens": 4096, "temperature": 0.6}
    assert row.params_from == "run_record"
    assert row.servers == ["http://gpu-2:30000"], "the fleet is the live list"
    assert row.counts is not None and row.lag is not None
    c = row.counts
    assert (c.published, c.published_exact, c.results, c.in_s3, c.exported) == (10, True, 10, 10, 10)
    assert c.regenerated == 7
    assert c.remaining == 0
    assert (row.lag.prompts, row.lag.sink) == (0, 0)
    assert row.members == {"reported": 1, "live": 0}
    assert (row.regenerations, row.regenerated_prompts) == (2, 7)
    assert row.export is not None and row.export["destination"] == "/data/a" and "kind" not in row.export
    assert row.s3_folder == "runs/a/"


def test_a_row_without_a_run_record_is_inferred_from_topics_and_reports() -> None:
    control = _control(_member("b", model="qwen3-8b", max_tokens=2048, thinking=True))
    facts = RunFacts(
        run_id="b",
        own_topics=frozenset({"completions", "errors", "control"}),
        prompts_topic="a.prompts",
        prompts_end={0: 6, 1: 6},
        generate_committed={0: 2},
        completions_end={0: 3},
        published=10,
        control=control,
        first_record_at=NOW - 900,
    )
    row = shape_run(facts, at=NOW, live_s=LIVE_S)
    assert (row.state, row.parent, row.by) == ("running", "a", None)
    assert (row.created_at, row.created_from, row.known_from) == (NOW - 900, "first_record", ["topics"])
    assert row.params == {"model": "qwen3-8b", "max_tokens": 2048, "thinking": True}
    assert row.params_from == "member_report"
    assert row.servers == ["http://gpu-0:30000"]
    assert row.partitions == 2
    c = row.counts
    assert c is not None and (c.published, c.results, c.remaining) == (10, 3, 7)
    assert row.lag == LagSummary(prompts=10, sink=3)
    assert row.members == {"reported": 1, "live": 1}


def test_a_run_known_only_from_s3_has_no_counts_and_is_idle() -> None:
    facts = RunFacts(run_id="old", s3_folder="runs/old/", s3_first_at=NOW - 86400)
    row = shape_run(facts, at=NOW, live_s=LIVE_S)
    assert (row.state, row.counts, row.lag, row.parent, row.prompts_topic) == ("idle", None, None, None, None)
    assert (row.created_at, row.created_from, row.known_from) == (NOW - 86400, "s3", ["s3"])
    assert (row.params, row.params_from, row.servers, row.last_activity_at) == ({}, None, [], None)


def _listing() -> RunsListing:
    halted = GateRecord(
        run_id="h", state="halted", epoch=1, at=NOW - 5, by="gen-0",
        reason="41% of results truncated", fix="raise --max-tokens",
    )  # fmt: skip
    rows = [
        shape_run(_finished_facts(control=_control(_record(), _export())), at=NOW, live_s=LIVE_S),
        shape_run(
            _finished_facts("h", control=_control(halted), published=None, first_record_at=NOW - 10),
            at=NOW,
            live_s=LIVE_S,
        ),
        shape_run(RunFacts(run_id="old", s3_folder="runs/old/"), at=NOW, live_s=LIVE_S),
    ]
    return RunsListing(NOW, "k:9092", "bucket", "runs", None, order_rows(rows), ["nope"])


def test_rows_are_oldest_first_and_the_document_has_the_schemas_keys() -> None:
    listing = _listing()
    assert [r.run_id for r in listing.runs] == ["a", "h", "old"], "unknown age last"
    doc = json.loads(json.dumps(listing.to_dict()))
    assert list(doc) == ["schema_version", "at", "kafka", "s3", "runs", "not_found"]
    assert doc["schema_version"] == 1 and doc["not_found"] == ["nope"]
    assert doc["s3"] == {"bucket": "bucket", "prefix": "runs", "listed": True, "error": None}
    assert list(doc["runs"][0]) == [
        "run_id", "state", "parent", "created_at", "created_from", "last_activity_at", "known_from",
        "by", "prompts_topic", "partitions", "params", "params_from", "servers", "counts", "lag",
        "members", "gate", "export", "regenerations", "regenerated_prompts", "s3_folder",
    ]  # fmt: skip
    assert list(doc["runs"][0]["counts"]) == [
        "published", "published_exact", "results", "completions", "errors", "in_s3", "exported", "remaining",
        "regenerated",
    ]  # fmt: skip
    assert doc["runs"][1]["gate"] == {
        "state": "halted", "epoch": 1, "reason": "41% of results truncated", "fix": "raise --max-tokens",
        "at": NOW - 5, "breaches": [],
    }  # fmt: skip
    assert doc["runs"][2]["counts"] is None and doc["runs"][2]["lag"] is None


def _render(listing: RunsListing) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=250, highlight=False, color_system=None).print(runs_view(listing))
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_table_has_a_row_per_run_and_says_why_a_run_halted() -> None:
    lines = _render(_listing())
    assert lines[0].split() == list(COLUMNS)
    a, h, old = (line.split() for line in lines[1:4])
    # run, state, created (date, time), parent, model, max_tokens, published ... regen, activity
    assert a[:2] == ["a", "done"] and a[4:16] == [
        "-", "qwen3-8b", "4096", "10", "10", "0", "0", "10", "10", "0", "1", "min",
    ]  # fmt: skip
    assert h[:2] == ["h", "halted"] and h[4:8] == ["-", "-", "-", "~12"], "published from end offsets, marked"
    assert old[:3] == ["old", "idle", "-"] and old[3:] == [*["-"] * 9, "0", "-"], "nothing to count"
    assert lines[4] == "h halted (gate epoch 1): 41% of results truncated; fix: raise --max-tokens"
    assert lines[5].startswith("~: published read from end offsets")


def test_an_empty_listing_says_where_nothing_was_found() -> None:
    empty = RunsListing(NOW, "k:9092", "bucket", "runs", None, [])
    assert _render(empty) == ["no runs found (Kafka at k:9092 and s3://bucket/runs/)"]
    kafka_only = RunsListing(NOW, "k:9092", "bucket", "runs", None, [], s3_listed=False)
    assert _render(kafka_only) == ["no runs found (Kafka at k:9092)"]


def test_plain_text_is_as_wide_as_the_table_needs_without_trailing_spaces() -> None:
    long_id = "experiment-" + "x" * 150
    row = shape_run(
        _finished_facts(long_id, control=_control(_record(long_id), _export())), at=NOW, live_s=LIVE_S
    )
    text = plain_text(runs_view(RunsListing(NOW, "k:9092", "bucket", "runs", None, [row])))
    lines = text.splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"{long_id}  done  "), "not cut, not wrapped"
    assert all(line == line.rstrip() for line in lines)
    assert "\x1b[" not in text, "no colours"


def test_a_record_model_left_at_default_shows_the_model_the_servers_serve() -> None:
    """``model`` "default" asks the server for whatever it serves (issue 30 item 9: ``runs`` said
    "default"): the latest member report's served model is shown instead; none reported, "default"."""
    record = _record(generation={"model": "default", "max_tokens": 128})
    control = _control(record, _member(at=NOW - 90, model="old"), _member(at=NOW - 5, model="gemma-3-270m"))
    row = shape_run(_finished_facts(control=control, published=3), at=NOW, live_s=LIVE_S)
    assert row.params == {"model": "gemma-3-270m", "max_tokens": 128}
    alone = shape_run(_finished_facts(control=_control(record), published=3), at=NOW, live_s=LIVE_S)
    assert alone.params["model"] == "default"
