"""One list of quality classes (:mod:`streams.quality`), the same everywhere: the same results
counted by the consumers (the gate's counts in their reports: ``kafkagen status``, the dashboard)
and by the export (the manifest's ``quality``, the dataset card, the export's and the main job's
summaries) show the same classes with the same counts, ``degenerate`` and ``error`` included; and
every command that names a class takes each of them."""

from __future__ import annotations

import io
from typing import Any

import msgspec
from rich.console import Console

from consumers.quality.flags import quality_flags
from consumers.quality.gate import tally
from launch.regenerate.select import parse_where
from launch.run.summary import summary as run_summary
from launch.status.dashboard.history import sample_of
from launch.status.shape import Observation, shape
from launch.status.view import status_view
from sinks.export.formats.card import card
from sinks.export.index import IdIndex
from sinks.export.manifest import Tally, build_manifest
from sinks.export.manifest import summary as export_summary
from streams.config import GateSettings
from streams.control import ClassCounts, ControlState, MemberReport
from streams.quality import QUALITY_CLASSES, QualityFlag, classes_text, result_classes
from tests.sinks.export.format_records import completion, dead_letter

RUN = "classes"
BUDGET_EATEN = quality_flags(
    content="",
    reasoning_content=None,
    finish_reason="length",
    tool_calls=None,
    tools_offered=False,
    thinking_requested=False,
)
"""The flags of an answer whose budget went to reasoning (docs/gate.md), raised by the consumers' check."""
RESULTS: list[list[str] | None] = [
    BUDGET_EATEN,  # empty_content, reasoning_ate_budget, truncated: degenerate
    [QualityFlag.TRUNCATED.value],  # a long answer cut short: flagged, usable
    [],
    [QualityFlag.REPETITION_LOOP.value],  # degenerate
    None,  # dead letters
    None,
]
"""Six results: the quality flags of each completion, None for a dead letter."""
EXPECTED = {
    "degenerate": 2,
    "empty_content": 1,
    "error": 2,
    "reasoning_ate_budget": 1,
    "repetition_loop": 1,
    "truncated": 2,
}


def _consumers_status() -> tuple[dict[str, Any], str]:
    """The status (JSON, and the terminal view's text) of the run whose one consumer counted
    :data:`RESULTS` (as :meth:`consumers.quality.fleet_gate.FleetGate.count` does) and reported them."""
    totals = ClassCounts()
    for flags in RESULTS:
        totals = tally(totals, result_classes(flags))
    report = MemberReport(
        run_id=RUN,
        instance="gen-0",
        incarnation="x",
        host="h",
        pid=1,
        server="http://gen-0:30000",
        totals=totals,
    )
    status = shape(
        Observation(
            run_id=RUN, at=1.0, prompts_topic_exists=True, control=ControlState(members={"gen-0": report})
        )
    )
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(status_view(status))
    return status.to_dict(), console.export_text()


def _export_manifest() -> dict[str, Any]:
    """The manifest of an export that wrote :data:`RESULTS` (as the second pass counts them)."""
    counted = Tally()
    for i, flags in enumerate(RESULTS):
        if flags is None:
            counted.error(dead_letter(i, RUN), 0)
        else:
            counted.completion(msgspec.structs.replace(completion(i, RUN), quality=flags), 0)
    manifest = build_manifest(
        run_id=RUN,
        source_uri=f"s3://bucket/runs/{RUN}/",
        sources=[],
        index=IdIndex(RUN, 10),
        tally=counted,
        expected=None,
        allow_missing=False,
        checked_against_kafka=False,
        gaps=[],
        coverage_problems=[],
        overlaps=[],
        shards=[],
        list_cap=10,
        card="README.md",
    )
    return manifest


def test_the_consumers_and_the_export_show_the_same_classes_degenerate_included() -> None:
    status, view = _consumers_status()
    manifest = _export_manifest()
    quality = {"results": len(RESULTS), "classes": EXPECTED}
    assert status["quality"] == quality
    assert manifest["quality"] == quality
    assert sample_of(status)["quality"] == EXPECTED  # the dashboard's charts and table

    line = classes_text(EXPECTED, len(RESULTS))
    assert line.startswith("degenerate 2, empty_content 1, error 2, ")
    assert f"quality    {line}" in view
    assert f"quality: {line}" in export_summary(manifest)
    assert f"  quality      {line}" in run_summary({**manifest, "expected": {"ids": 6}}, 1.0, None, "/d")
    listed = ", ".join(f"`{name}` {n}" for name, n in EXPECTED.items())
    assert f"- by quality class (of {len(RESULTS)} records): {listed}" in card(manifest)


def test_every_class_has_a_threshold_and_can_select_results_to_regenerate() -> None:
    assert set(GateSettings().thresholds()) == set(QUALITY_CLASSES)
    assert parse_where([f"quality={','.join(QUALITY_CLASSES)}"]).classes == set(QUALITY_CLASSES)
    assert {"degenerate", "error"} <= set(QUALITY_CLASSES)
