"""The run status, shaped from what a collection read (:mod:`launch.status.shape`, pure) and shown
(:mod:`launch.status.view`): counts in prompts, the exact offset-based done, lag per partition and
member, servers from reports and probes, rates, ETA, and the schema's keys."""

from __future__ import annotations

import io
import json
import re

from launch.status.shape import GroupMember, Observation, ServerProbe, occupancy, shape
from launch.status.view import progress_line, status_line, status_view
from streams.control import Breach, ClassCounts, ControlState, ExportReport, GateRecord, MemberReport

NOW = 1_764_660_000.0
P = "demo.prompts"
C = "demo.completions"
E = "demo.errors"


def _report(instance: str, **kw: object) -> MemberReport:
    base: dict[str, object] = {
        "run_id": "demo",
        "instance": instance,
        "incarnation": "x",
        "host": "gpu-host",
        "pid": 1,
        "server": f"http://{instance}:30000",
        "at": NOW - 1.0,
    }
    return MemberReport(**{**base, **kw})  # type: ignore[arg-type]


def _obs(**kw: object) -> Observation:
    """100 prompts on 2 partitions (53 and 54 offsets: 7 transaction markers), 80 results (75
    completions, 5 errors), 70 in S3, two members."""
    base: dict[str, object] = {
        "run_id": "demo",
        "at": NOW,
        "prompts_topic_exists": True,
        "completions_topic_exists": True,
        "prompts_topic": P,
        "completions_topic": C,
        "errors_topic": E,
        "prompts_end": {0: 53, 1: 54},
        "generate_committed": {0: 50, 1: 40},
        "completions_end": {0: 40, 1: 35},
        "errors_end": {0: 5},
        "sink_committed": {(C, 0): 40, (C, 1): 25, (E, 0): 5},
        "published": 100,
        "generate_members": [
            GroupMember("gen-0", "/10.0.0.1", {P: [0]}),
            GroupMember("gen-1", "/10.0.0.2", {P: [1]}),
        ],
        "sink_members": 1,
    }
    return Observation(**{**base, **kw})  # type: ignore[arg-type]


def test_counts_are_prompts_and_records_not_offsets() -> None:
    status = shape(_obs())
    p = status.prompts
    assert (p.published, p.published_exact) == (100, True)
    assert (p.results, p.completions, p.errors, p.in_s3, p.remaining) == (80, 75, 5, 70, 20)
    assert p.exported is None
    # without a producer resume point: the end offsets, said to be inexact
    fallback = shape(_obs(published=None)).prompts
    assert (fallback.published, fallback.published_exact) == (107, False)


def test_lag_per_partition_and_per_member_and_the_sink() -> None:
    lag = shape(_obs()).lag
    assert lag.total == 3 + 14
    assert [(x.partition, x.end_offset, x.committed_offset, x.lag, x.owner) for x in lag.partitions] == [
        (0, 53, 50, 3, "gen-0"),
        (1, 54, 40, 14, "gen-1"),
    ]
    assert [(c.member, c.client_host, c.partitions, c.lag) for c in lag.consumers] == [
        ("gen-0", "/10.0.0.1", [0], 3),
        ("gen-1", "/10.0.0.2", [1], 14),
    ]
    assert (lag.sink.lag, lag.sink.members) == (10, 1)
    # a partition nobody holds (a member gone, before the rebalance) has no owner
    orphan = shape(_obs(generate_members=[GroupMember("gen-0", "/10.0.0.1", {P: [0]})])).lag
    assert orphan.partitions[1].owner is None


def test_done_is_exact_on_offsets_transaction_markers_included() -> None:
    # every prompt has a result and every result is in S3, but the generation group has not yet
    # committed past the last transaction markers: not done
    almost = _obs(
        generate_committed={0: 52, 1: 54},
        completions_end={0: 50, 1: 50},
        errors_end={},
        sink_committed={(C, 0): 50, (C, 1): 50},
    )
    assert shape(almost).state == "running"
    assert shape(almost).prompts.remaining == 0
    done = _obs(
        generate_committed={0: 53, 1: 54},
        completions_end={0: 50, 1: 50},
        errors_end={},
        sink_committed={(C, 0): 50, (C, 1): 50},
    )
    assert shape(done).state == "done"
    assert shape(done).eta_s is None
    # one result not yet in S3: not done
    s3_behind = _obs(**{**done.__dict__, "sink_committed": {(C, 0): 50, (C, 1): 49}})
    assert shape(s3_behind).state == "running"


def test_states_not_found_halted_idle() -> None:
    assert shape(Observation(run_id="nope", at=NOW, prompts_topic_exists=False)).state == "not_found"
    halted = ControlState(
        gate=GateRecord(
            run_id="demo",
            state="halted",
            epoch=0,
            at=NOW - 5,
            by="gen-0",
            reason="93% empty content",
            fix="raise --max-tokens",
            breaches=[
                Breach(cls="empty_content", count=51, results=55, share=0.93, threshold=0.25, phase="warmup")
            ],
        )
    )
    status = shape(_obs(control=halted))
    assert status.state == "halted"
    assert (status.gate.state, status.gate.reason, status.gate.fix) == (
        "halted",
        "93% empty content",
        "raise --max-tokens",
    )
    assert status.gate.breaches[0]["cls"] == "empty_content"
    resumed = ControlState(gate=GateRecord(run_id="demo", state="resumed", epoch=1, at=NOW, by="cli"))
    assert shape(_obs(control=resumed)).state == "running"
    assert shape(_obs(control=resumed)).gate.epoch == 1
    assert shape(_obs(generate_members=[])).state == "idle"
    # a live report keeps it running even while the member is between group generations
    live = ControlState(members={"gen-0": _report("gen-0")})
    assert shape(_obs(generate_members=[], control=live)).state == "running"


def test_servers_rates_quality_and_eta_from_reports_and_probes() -> None:
    control = ControlState(
        members={
            "gen-0": _report(
                "gen-0",
                tokens_per_s=170.0,
                completions_per_s=0.6,
                completions=40,
                errors=2,
                in_flight=8,
                window=10,
                running=7,
                queued=0,
                slots=8,
                totals=ClassCounts(results=42, classes={"truncated": 4, "error": 2}),
            ),
            "gen-1": _report(
                "gen-1",
                tokens_per_s=150.0,
                completions_per_s=0.4,
                totals=ClassCounts(results=38, classes={"truncated": 6}),
                running=3,
                queued=2,
            ),
            "gen-old": _report("gen-old", at=NOW - 600, completions_per_s=9.0, state="running"),
        },
        export=ExportReport(
            run_id="demo", at=NOW, ids=99, completions=95, errors=4, missing=1, duplicates_dropped=0,
            destination="/d", host="h",
        ),
    )  # fmt: skip
    # gen-0's server answered from here (8 running now); gen-1's was not asked (another host's)
    probes = {"http://gen-0:30000": ServerProbe("http://gen-0:30000", True, "qwen3", 8, 8, 0)}
    status = shape(_obs(control=control, probes=probes, extra_servers=["http://main-job:30000/"]))
    by = {s.instance: s for s in status.servers}
    assert set(by) == {"gen-0", "gen-1", "gen-old", "http://main-job:30000"}
    g0, g1, old, url_only = by["gen-0"], by["gen-1"], by["gen-old"], by["http://main-job:30000"]
    assert (g0.running, g0.queued, g0.slots, g0.occupancy, g0.model, g0.server_up) == (
        8,
        0,
        8,
        1.0,
        "qwen3",
        True,
    )
    assert (g1.running, g1.queued, g1.occupancy, g1.server_up) == (3, 2, 1.0, True)
    assert (old.state, old.completions_per_s, old.report_age_s) == ("stale", 0.0, 600.0)
    assert (url_only.state, url_only.server_up, url_only.report_age_s) == ("server_down", False, None)
    assert (status.rates.completions_per_s, status.rates.tokens_per_s) == (1.0, 320.0)
    assert status.eta_s == 20.0  # 20 remaining at 1 per second
    assert status.quality.results == 80
    assert status.quality.classes == {"error": 2, "truncated": 10}
    assert status.prompts.exported == 99
    assert status.export is not None and status.export["missing"] == 1 and "kind" not in status.export


def test_the_measured_rate_stands_in_while_no_member_reports() -> None:
    status = shape(_obs(observed_rate=2.0))
    assert status.rates.completions_per_s == 2.0
    assert status.eta_s == 10.0
    assert shape(_obs()).eta_s is None, "no rate known: no ETA"


def test_occupancy_rule() -> None:
    assert occupancy(3, 1, None) == 1.0, "requests waiting: the server runs all it can"
    assert occupancy(4, 0, 8) == 0.5
    assert occupancy(16, 0, 8) == 1.0
    assert occupancy(None, None, 8) is None
    assert occupancy(4, 0, None) is None


SCHEMA_KEYS = {
    "": {"schema_version", "run_id", "at", "state", "prompts", "rates", "eta_s", "lag", "servers",
         "quality", "gate", "export", "eta_range_s", "projection", "budgets"},
    "prompts": {"published", "published_exact", "regenerated", "results", "completions", "errors", "in_s3",
                "exported", "remaining"},
    "rates": {"completions_per_s", "tokens_per_s"},
    "lag": {"total", "partitions", "consumers", "sink"},
    "partition": {"partition", "end_offset", "committed_offset", "lag", "owner"},
    "consumer": {"member", "client_host", "partitions", "lag"},
    "sink": {"lag", "members"},
    "server": {"instance", "server", "model", "host", "state", "server_up", "report_age_s", "tokens_per_s",
               "completions_per_s", "completions", "errors", "in_flight", "window", "running", "queued",
               "slots", "occupancy"},
    "quality": {"results", "classes"},
    "gate": {"state", "epoch", "reason", "fix", "at", "breaches"},
    "projection": {"at", "results", "total", "completions", "output_tokens", "gpu_hours", "finish_at",
                   "servers", "started_at", "classes", "gpu_hours_so_far", "replayed"},
    "replayed": {"label", "source", "checkpoint", "summary"},
    "checkpoint": {"fraction", "seen", "total", "output_tokens", "finish", "gpu_hours"},
    "check": {"error", "held"},
    "estimate": {"value", "low", "high"},
}  # fmt: skip
"""The keys of the schema_version 1 document (the dashboard reads them)."""


def test_the_document_has_the_schema_keys_and_is_json() -> None:
    control = ControlState(members={"gen-0": _report("gen-0", completions=3, completion_tokens=30)})
    doc = json.loads(json.dumps(shape(_obs(control=control)).to_dict()))
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == 1
    assert set(doc) == SCHEMA_KEYS[""]
    for key in ("prompts", "rates", "lag", "quality", "gate"):
        assert set(doc[key]) == SCHEMA_KEYS[key], key
    assert set(doc["lag"]["partitions"][0]) == SCHEMA_KEYS["partition"]
    assert set(doc["lag"]["consumers"][0]) == SCHEMA_KEYS["consumer"]
    assert set(doc["lag"]["sink"]) == SCHEMA_KEYS["sink"]
    assert set(doc["servers"][0]) == SCHEMA_KEYS["server"]
    assert set(doc["projection"]) == SCHEMA_KEYS["projection"]
    assert set(doc["projection"]["output_tokens"]) == SCHEMA_KEYS["estimate"]


def test_the_lines_count_prompts_and_are_one_line() -> None:
    status = shape(_obs())
    line = progress_line(status)
    assert line.startswith("generated 80/100 (5 errors), in S3 70/80,"), line
    full = status_line(status)
    assert "\n" not in full and "run demo running: published 100, results 80 (5 errors), in S3 70" in full
    assert "107" not in full, "offsets are not counts"
    assert status_view(status) is not None


def test_the_terminal_view_shows_the_halt_with_its_fix_and_the_tables() -> None:
    from rich.console import Console

    control = ControlState(
        gate=GateRecord(
            run_id="demo", state="halted", epoch=2, at=NOW, by="gen-0", reason="93% empty content",
            fix="raise --max-tokens",
        ),
        members={"gen-0": _report("gen-0", tokens_per_s=170.0, running=7, queued=0, slots=8)},
    )  # fmt: skip
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(status_view(shape(_obs(control=control))))
    text = console.export_text()
    assert "gate       HALTED (epoch 2): 93% empty content" in text
    assert "fix: raise --max-tokens" in text
    assert re.search(r"gen-0 +http://gen-0:30000 +running +yes +170 ", text), text
    assert re.search(r"gen-1 +/10\.0\.0\.2 +1 +14", text), text


def test_regenerated_prompts_count_as_published_and_remaining() -> None:
    from streams.control import RegenerateRecord

    control = ControlState()
    control.regenerations["d"] = RegenerateRecord(
        run_id="demo", digest="d", where={}, overrides={}, ids=4, attempts={"1": 4}, at=0.0, by="t"
    )
    status = shape(_obs(control=control))
    assert status.prompts.published == 104 and status.prompts.regenerated == 4
    assert status.prompts.remaining == 24, "the regenerated prompts are still to generate"
    assert status.to_dict()["prompts"]["regenerated"] == 4
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(status_view(status))
    assert "published 104 (4 of them regenerated: kafkagen regenerate), remaining 24" in console.export_text()
