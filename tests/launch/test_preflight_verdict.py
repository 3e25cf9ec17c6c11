"""The preflight's verdict and its requests (:mod:`launch.preflight.verdict`, :mod:`launch.preflight.check`):
the statistics in milliseconds, then against the SGLang-API simulator in this process (a thread of
its own, run at 10,000 x), so this module needs no service and no child process."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from consumers.servers import ServerClient
from launch.preflight.check import preflight, request_seed, run_preflight
from launch.preflight.sample import Sample, demo_sample, read_sample
from launch.preflight.stats import SampleAnswer, recommend
from launch.preflight.verdict import CONFIDENCE, binomial_tail, judge, rate_bounds
from launch.run.job import LOCAL_GATE
from simulator import DEFAULT_PROFILE, SimulatedServer
from streams.config import GateSettings, GenerationSettings, Settings
from streams.control import ClassCounts
from streams.inputs import InputMapping, MappingOptions
from streams.records import GenerationParams

pytestmark = pytest.mark.timeout(120)


def _generation(max_tokens: int, thinking: bool) -> GenerationSettings:
    return GenerationSettings(max_tokens=max_tokens, chat_template_kwargs={"enable_thinking": thinking})


# -- the bounds ------------------------------------------------------------------------------------


def test_the_bounds_are_the_textbook_clopper_pearson_ones() -> None:
    """At one-sided 97.5% each, the bounds are the two-sided 95% exact interval of Newcombe's
    examples (Statistics in Medicine 17, 1998, "Two-sided confidence intervals for the single
    proportion", method 5); at the edges they have closed forms."""
    newcombe = {(81, 263): (0.2527, 0.3676), (15, 148): (0.0578, 0.1617), (0, 20): (0.0, 0.1684),
                (1, 29): (0.0009, 0.1776)}  # fmt: skip
    for (count, results), interval in newcombe.items():
        assert tuple(round(b, 4) for b in rate_bounds(count, results, 0.975)) == interval
    assert rate_bounds(0, 4) == pytest.approx((0.0, 1 - 0.05**0.25))  # P(none of 4) = 5%
    assert rate_bounds(4, 4) == pytest.approx((0.05**0.25, 1.0))  # P(all of 4) = 5%
    assert rate_bounds(0, 4)[0] == 0.0 and rate_bounds(4, 4)[1] == 1.0, "exactly, not nearly"
    assert rate_bounds(1, 10)[0] == pytest.approx(1 - 0.95**0.1)  # P(at least 1 of 10) = 5%
    assert binomial_tail(3, 12, 0.1) == pytest.approx(
        sum(math.comb(12, k) * 0.1**k * 0.9 ** (12 - k) for k in range(3, 13))
    )
    with pytest.raises(ValueError, match="1 of 0"):
        rate_bounds(1, 0)


@pytest.mark.parametrize("results", [4, 12, 32, 100])
@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5, 0.9])
def test_a_sample_at_the_threshold_is_refused_at_most_as_often_as_the_confidence_allows(
    results: int, rate: float
) -> None:
    """The verdict's promise, computed exactly over the binomial distribution: a server whose
    true rate is at the threshold (the gate would not trip) is refused with probability at most
    1 - CONFIDENCE, and one at the threshold is called within it no more often. (Wilson's bound
    breaks it: at 12 answers and 10%, 11% of such servers would be refused.)"""
    counts = range(results + 1)
    pmf = [math.comb(results, k) * rate**k * (1 - rate) ** (results - k) for k in counts]
    refused = sum(p for k, p in zip(counts, pmf, strict=True) if rate_bounds(k, results)[0] > rate)
    within = sum(p for k, p in zip(counts, pmf, strict=True) if rate_bounds(k, results)[1] <= rate)
    assert refused <= 1 - CONFIDENCE + 1e-9, refused
    assert within <= 1 - CONFIDENCE + 1e-9, within


def test_four_answers_cannot_refuse_what_they_cannot_tell() -> None:
    """Issue 30's flip-flop: the local 4-prompt preflight said "ok", then "over the gate's
    thresholds: repetition_loop in 3 of 4 ... degenerate in 4 of 4" on the same input. On the
    local thresholds 4 answers decide nothing; the same shares over 32 answers do."""
    local = GateSettings(**LOCAL_GATE).thresholds()
    classes = {"repetition_loop": 3, "degenerate": 4, "truncated": 4}
    four = judge(ClassCounts(results=4, classes=classes), local)
    assert four.state == "undecided" and four.breaches() == []
    line = four.line()
    assert line.startswith("not enough answers to judge at 95% confidence (4 answers): ")
    assert "degenerate 4 of 4 (100%, bounds 47%-100%, max 90%)" in line
    assert "repetition_loop 3 of 4 (75%, bounds 25%-99%, max 60%)" in line
    assert "a larger --preflight-sample decides" in line
    none_seen = judge(ClassCounts(results=4), local)
    assert none_seen.state == "undecided", "0 of 4 does not show a rate under 25% either"
    assert "never seen, whose upper bound 53% is still above their maximum" in none_seen.line()

    many = judge(ClassCounts(results=32, classes={"repetition_loop": 31, "degenerate": 32}), local)
    assert many.state == "refused" and [b.cls for b in many.breaches()] == ["repetition_loop", "degenerate"]
    assert many.breaches()[0].bound == pytest.approx(rate_bounds(31, 32)[0])
    fine = judge(ClassCounts(results=32, classes={"truncated": 2}), GateSettings().thresholds())
    assert fine.state == "ok"
    assert fine.line().startswith(
        "ok at 95% confidence: every class's upper bound within its maximum (closest: truncated 2 of 32"
    )


def test_the_recommendation_applies_only_where_answers_were_cut_off() -> None:
    fits = [SampleAnswer("p", 512, "stop", completion_tokens=400, needed=400)] * 8
    assert recommend(fits).max_tokens == 512 and not recommend(fits).applies, "nothing was cut off"
    cut = [SampleAnswer("p", 512, "length", completion_tokens=512, needed=2000, resent_at=16384)]
    assert recommend(fits * 4 + cut).applies is False, "a p95 under the budget would only lower it"
    assert recommend(fits + cut * 2).applies and recommend(fits + cut * 2).budget == 512


# -- the simulator in this process -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang() -> Iterator[str]:
    """A simulated SGLang server (reasoning parser qwen3) on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> SimulatedServer:
        server = SimulatedServer(replace(DEFAULT_PROFILE, warmup_s=0.0), time_scale=10_000)
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield server.url
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every chat completion body the preflight sends, in the order sent."""
    bodies: list[dict[str, Any]] = []
    chat = ServerClient.chat

    async def recording(self: ServerClient, body: dict[str, Any]) -> Any:
        bodies.append(json.loads(json.dumps(body)))
        return await chat(self, body)

    monkeypatch.setattr(ServerClient, "chat", recording)
    return bodies


def _by_rid(bodies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["rid"]: b for b in bodies}


def test_the_same_preflight_sends_the_same_requests_seeded(sglang: str, sent: list[dict[str, Any]]) -> None:
    """Same input, settings and servers: the same sample and the same requests, each with a seed
    drawn from --preflight-seed (llama.cpp and a deterministic SGLang sample with it: the answers
    repeat); the re-send of a cut-off answer keeps its seed; a seed the record sets wins."""
    sample = demo_sample(Settings(), size=6, seed=3)
    assert sample == demo_sample(Settings(), size=6, seed=3)
    first = run_preflight([sglang], _generation(512, True), sample, timeout_s=30, seed=3)
    once = _by_rid(sent)
    sent.clear()
    run_preflight([sglang], _generation(512, True), sample, timeout_s=30, seed=3)
    assert _by_rid(sent) == once and len(once) >= 6
    assert all(b["seed"] == request_seed(3, _prompt_of(b, sample)) for b in once.values())
    assert len({b["seed"] for b in once.values() if b["rid"].endswith("-00000001")}) == 6, "one per prompt"
    resent = [b for b in once.values() if b["rid"].endswith("-00000002")]
    assert resent and first.recommendation().resent == len(resent)
    assert all(b["seed"] == once[b["rid"][:-1] + "1"]["seed"] for b in resent)

    sent.clear()
    run_preflight([sglang], _generation(512, True), sample, timeout_s=30, seed=4)
    assert {b["seed"] for b in sent}.isdisjoint({b["seed"] for b in once.values()}), "--preflight-seed"
    seeded = msgspec.structs.replace(sample.prompts[0], params=GenerationParams(seed=7))
    own = replace(sample, prompts=(seeded,))
    sent.clear()
    run_preflight([sglang], _generation(4096, False), own, timeout_s=30, seed=3)
    assert [b["seed"] for b in sent] == [7], "the run sends the record's seed: so does its preflight"


def _prompt_of(body: dict[str, Any], sample: Sample) -> str:
    [prompt] = [p for p in sample.prompts if p.messages == body["messages"]]
    return prompt.id


def test_a_small_sample_says_it_cannot_judge_and_a_large_one_refuses(sglang: str) -> None:
    """Reasoning at 64 tokens empties every answer; on thresholds of 90% four answers cannot show a
    rate above them (lower bound 47%) and refuse nothing, 32 answers can (lower bound 91%)."""
    gate = GateSettings(max_empty_content=0.9, max_reasoning_ate_budget=0.9, max_degenerate=0.9)
    lines: list[str] = []
    small = preflight(
        [sglang], _generation(64, True), demo_sample(Settings(), size=4), gate=gate, timeout_s=30,
        echo=lines.append, resend=False,
    )  # fmt: skip
    assert small.passed and small.undecided and not small.failed
    text = "\n".join(lines)
    assert "  verdict    not enough answers to judge at 95% confidence (4 answers): " in text, text
    assert "reasoning_ate_budget 4 of 4 (100%, bounds 47%-100%, max 90%)" in text
    assert "recommended --max-tokens at least" in text, "cut off at max_tokens: the budget is the fix"
    large = run_preflight([sglang], _generation(64, True), demo_sample(Settings(), size=32), gate=gate,
                          timeout_s=30, resend=False)  # fmt: skip
    assert [s.name for s in large.failed] == [sglang]
    assert "reasoning_ate_budget in 32 of 32 results (100%, lower bound 91% > 90%, preflight)" in "\n".join(
        large.lines()
    )


def test_the_recommendation_is_printed_only_where_answers_were_cut_off(sglang: str) -> None:
    report = run_preflight([sglang], _generation(16384, False), demo_sample(Settings(), size=8), timeout_s=30)
    assert report.summary().finish == {"stop": 8}
    text = "\n".join(report.lines())
    assert "recommended" not in text and "--max-tokens" not in text, text
    assert "  verdict    ok at 95% confidence" not in text, "8 answers cannot show 0 under 25%"
    assert report.to_json()["recommendation"]["applies"] is False


def test_rows_no_option_maps_are_named_with_their_fields_and_the_options(
    sglang: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30: "no prompt could be read ...: nothing was checked" with no reason. The sample
    says why as kafkagen produce does for the same lines (the fields found, --input-format and
    --prompt-field), in the command's error and in the main job's report."""
    rows = tmp_path / "rows.jsonl"
    unmapped = [{"instruction": f"do {i}", "output": "x", "n": i} for i in "abc"]
    rows.write_text("".join(json.dumps(row) + "\n" for row in unmapped))
    sample = read_sample([str(rows)], InputMapping(), Settings())
    assert not sample.prompts and sample.bad == 3
    why = sample.why_empty()
    assert why.startswith(f"no prompt could be read from {rows}: nothing was checked; all 3 lines read")
    assert (
        f"the first: bad line {rows}:1: cannot tell this row's format from its fields (instruction, n, "
        "output): pass --input-format (chat, prompt, openai_batch, mt_bench, bfcl, sharegpt) or "
        "--prompt-field NAME for the field that holds the prompt (text fields here: instruction, output, n)"
    ) in why
    lines: list[str] = []
    preflight([sglang], _generation(512, False), sample, echo=lines.append)
    assert lines == [f"preflight: {why}"]
    wrong = read_sample([str(rows)], InputMapping(MappingOptions(prompt_field="question")), Settings())
    assert "prompt field 'question' is missing; the row has instruction, n, output" in wrong.why_empty()
    mapped = read_sample([str(rows)], InputMapping(MappingOptions(prompt_field="instruction")), Settings())
    assert len(mapped.prompts) == 3 and mapped.bad == 0

    from launch.preflight.cli import main

    capsys.readouterr()
    assert main([str(rows), "--server", sglang]) == 2
    assert f"error: {why}" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main([str(empty), "--server", sglang, "--json"]) == 2
    assert "nothing was checked; it holds no row (empty, or blank lines only)" in capsys.readouterr().err
