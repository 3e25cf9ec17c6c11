"""The preflight (:mod:`launch.preflight.check`): its pure measurements in milliseconds, then against real
servers: the SGLang-API simulator as a process (its thinking-on lengths: lognormal, median 1,800
tokens, 60-90% reasoning, ``simulator/profile.py``; reasoning parser on or off), the main job on
the test stack, and the local llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from launch.preflight.check import check_preflight, run_preflight
from launch.preflight.cli import main, preflight_options
from launch.preflight.options import PreflightOptions
from launch.preflight.sample import Sample, demo_sample, read_sample
from launch.preflight.stats import (
    Distribution,
    SampleAnswer,
    percentile,
    recommend,
    refusal,
    retry_budget,
    summarize,
)
from launch.stack import LocalStack
from launch.stack.process import wait_until
from streams.config import GenerationSettings, Settings
from streams.control import Breach
from streams.errors import PreflightError, UnavailableError
from streams.inputs import InputMapping, MappingOptions
from streams.kafka import end_offsets
from tests.helpers import REPO_ROOT, partitions_of, unused_port

GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"
QUESTION = InputMapping(MappingOptions(prompt_field="question"))


def _generation(max_tokens: int, thinking: bool) -> GenerationSettings:
    return GenerationSettings(max_tokens=max_tokens, chat_template_kwargs={"enable_thinking": thinking})


# -- pure ------------------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 33))  # 32 samples: p95 is the second largest
    assert percentile(values, 0.95) == 31 and percentile(values, 0.5) == 16
    assert Distribution.of([]) == Distribution(0, 0, 0, 0)
    assert Distribution.of([5.0]).line() == "p50 5, p95 5, max 5"


def test_the_retry_budget_is_large_but_within_the_context() -> None:
    assert retry_budget(512, 100, None) == 16384
    assert retry_budget(8192, 100, None) == 32768
    assert retry_budget(512, 100, 8192) == 8092
    assert retry_budget(4096, 2000, 6000) == 4096  # no room beyond the budget: no re-send


def _answer(
    needed: int, *, cut: bool = False, at_least: bool = False, resent_at: int | None = 16384
) -> SampleAnswer:
    return SampleAnswer(
        "p", 512, finish_reason="length" if cut else "stop", completion_tokens=min(needed, 512),
        flags=("truncated",) if cut else (), needed=needed, needed_at_least=at_least,
        resent_at=resent_at if cut else None,
    )  # fmt: skip


def test_the_recommendation_is_the_needed_p95_with_headroom_rounded_up() -> None:
    answers = [_answer(100 * i, cut=100 * i > 512) for i in range(1, 33)]  # needs 100 .. 3200
    rec = recommend(answers)
    assert rec.needed.p95 == 3100 and rec.max_tokens == 4096  # 3100 x 1.25 = 3875 -> 16 x 256
    assert not rec.at_least and rec.resent == 27
    assert "27 cut off at max_tokens were sent again with 16384" in rec.explanation


def test_answers_still_cut_off_make_it_at_least() -> None:
    answers = [_answer(16384, cut=True, at_least=True)] * 4 + [_answer(300)] * 28
    rec = recommend(answers)
    assert rec.at_least and rec.retry_budget == 16384 and rec.max_tokens == 20480
    assert rec.still_cut == 4 and rec.unmeasured == 0
    assert "4 still cut off at 16384 tokens, so at least that" in rec.explanation
    not_resent = recommend([_answer(512, cut=True, at_least=True, resent_at=None)] * 2 + [_answer(200)] * 2)
    assert not_resent.at_least and not_resent.resent == 0 and not_resent.unmeasured == 2
    assert not_resent.max_tokens == 768 and "2 cut off and not measured" in not_resent.explanation
    assert "were sent again" not in not_resent.explanation
    assert recommend([SampleAnswer("p", 512, error="HTTP 400")]).max_tokens is None


def test_the_summary_counts_finish_reasons_classes_and_errors() -> None:
    answers = [
        SampleAnswer("a", 512, "length", completion_tokens=512, reasoning_tokens=512, reasoning=True,
                     flags=("empty_content", "reasoning_ate_budget", "truncated")),
        SampleAnswer("b", 512, "stop", completion_tokens=300, reasoning_tokens=200, reasoning=True, flags=()),
        SampleAnswer("c", 512, error="HTTP 400: too long"),
    ]  # fmt: skip
    s = summarize(answers, 512)
    assert s.finish == {"length": 1, "stop": 1, "error": 1}
    assert s.counts.results == 3
    assert s.counts.classes == {"degenerate": 1, "empty_content": 1, "error": 1, "reasoning_ate_budget": 1,
                                "truncated": 1}  # fmt: skip
    assert s.reasoning_share == 1.0 and s.answer_tokens.max == 100 and s.reasoning_tokens.max == 512
    assert s.errors == ("HTTP 400: too long",)


def test_reasoning_with_thinking_off_is_not_told_to_turn_thinking_off() -> None:
    found = [Breach(cls="reasoning_ate_budget", count=9, results=10, share=0.9, threshold=0.25,
                    phase="preflight")]  # fmt: skip
    _reason, fix = refusal(found, {"max_tokens": 512, "thinking": True})
    assert "--no-thinking" in fix
    _reason, fix = refusal(found, {"max_tokens": 512, "thinking": False})
    assert "ignores enable_thinking=false" in fix and "--no-thinking" not in fix


def test_the_sample_is_seeded_spread_mapped_and_skips_bad_lines(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    lines = [json.dumps({"q": f"question {i}", "id": f"r{i}"}) for i in range(1000)]
    lines[3] = "{not json"
    rows.write_text("\n".join(lines) + "\n")
    mapping = InputMapping(MappingOptions(prompt_field="q", id_field="id"))
    settings = Settings()
    first = read_sample([str(rows)], mapping, settings, size=32)
    assert first == read_sample([str(rows)], mapping, settings, size=32), "seeded"
    ids = {p.id for p in first.prompts}
    assert len(ids) == 32 and "r3" not in ids and first.scanned == 999 and first.whole
    assert max(int(i[1:]) for i in ids) > 500, "spread over the input, not its first lines"
    assert first.prompts[0].messages[-1]["content"].startswith("question ")
    assert {p.id for p in read_sample([str(rows)], mapping, settings, size=32, seed=1).prompts} != ids
    head = read_sample([str(rows)], mapping, settings, size=8, scan=20)
    assert head.scanned == 20 and not head.whole and all(int(p.id[1:]) <= 20 for p in head.prompts)
    assert "its first 20 good records" in head.describe()
    limited = InputMapping(MappingOptions(prompt_field="q", id_field="id", limit=50))
    first_rows = read_sample([str(rows)], limited, settings, size=32)
    assert first_rows.scanned == 49 and all(int(p.id[1:]) < 50 for p in first_rows.prompts), "--limit's rows"
    assert read_sample(["-"], mapping, settings).skipped == ("-",), "stdin is the producer's"
    demo = demo_sample(settings, size=32)
    assert len(demo.prompts) == 32 and demo.source.endswith("data/prompts/demo.jsonl")


def test_an_id_repeated_in_the_input_is_sampled_once(tmp_path: Path) -> None:
    """Each id goes to a server once: SGLang refuses a second request with the id of one in
    flight (400 "Duplicate request ID"), which the gate would count as errors."""
    rows = tmp_path / "rows.jsonl"
    lines = [json.dumps({"q": f"question {i % 5}", "id": f"r{i % 5}"}) for i in range(12)]
    rows.write_text("\n".join(lines) + "\n")
    sample = read_sample(
        [str(rows)], InputMapping(MappingOptions(prompt_field="q", id_field="id")), Settings(), size=32
    )
    assert sorted(p.id for p in sample.prompts) == [f"r{i}" for i in range(5)]
    assert sample.scanned == 5 and sample.repeated == 7
    assert "5 good records; 7 with an id seen before left out" in sample.describe()


def test_the_preflight_flags_make_one_options_object_and_the_old_names_are_gone() -> None:
    seen: list[PreflightOptions] = []

    @click.command()
    @preflight_options
    def command(preflight: PreflightOptions) -> None:
        seen.append(preflight)

    runner = CliRunner()
    assert runner.invoke(command, ["--no-preflight", "--preflight-timeout", "5"]).exit_code == 0
    assert runner.invoke(command, ["--ignore-preflight", "--preflight-sample", "8"]).exit_code == 0
    assert runner.invoke(command, []).exit_code == 0
    assert seen[0] == PreflightOptions(enabled=False, timeout_s=5.0)
    assert seen[1] == PreflightOptions(enforce=False, sample=8)
    assert seen[2] == PreflightOptions()
    for old in ("--no-probe", "--probe-timeout"):  # the 0.1.0 names: a usage error now
        result = runner.invoke(command, [old])
        assert result.exit_code == 2 and f"No such option: {old}" in result.output
    assert len(seen) == 3


# -- the simulator ---------------------------------------------------------------------------------


def _simulator(*args: str) -> Iterator[str]:
    port = unused_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(port), "--time-scale", "50", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/health_generate", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(up, timeout_s=30, interval_s=0.2), "the simulator did not come up"
        yield url
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def sglang() -> Iterator[str]:
    """A simulated SGLang server started with ``--reasoning-parser qwen3``."""
    yield from _simulator("--reasoning-parser", "qwen3")


@pytest.fixture(scope="module")
def sglang_no_parser() -> Iterator[str]:
    """A simulated SGLang server started without a reasoning parser."""
    yield from _simulator("--reasoning-parser", "none")


@pytest.fixture(scope="module")
def gsm8k() -> Sample:
    return read_sample([str(GSM8K)], QUESTION, Settings())


def test_reasoning_that_eats_the_budget_is_refused_and_the_recommendation_passes(
    sglang: str, gsm8k: Sample
) -> None:
    """The degenerate run's configuration (thinking on, max_tokens 512, GSM8K) is refused with the
    cause, the fix and a measured max_tokens; the same sample at that max_tokens passes."""
    report = run_preflight({"gpu-3": sglang}, _generation(512, True), gsm8k, timeout_s=60)
    (server,) = report.servers
    assert server.info is not None and server.info.kind == "sglang"
    assert {b.cls for b in server.breaches} >= {"reasoning_ate_budget", "empty_content"}
    summary = report.summary()
    assert summary.results == 32 and summary.finish.get("length", 0) > 16
    assert summary.reasoning_share == 1.0 and summary.reasoning_tokens.max == 512
    rec = report.recommendation()
    assert rec.max_tokens is not None and rec.max_tokens > 512 and not rec.at_least
    assert rec.resent == summary.finish["length"]
    with pytest.raises(PreflightError) as info:
        check_preflight(report, skip_hint="--ignore-preflight runs anyway")
    message = str(info.value)
    assert "gpu-3: reasoning_ate_budget in" in message and "at max_tokens 512, thinking on" in message
    assert "fix: raise --max-tokens" in message
    assert f"recommended: --max-tokens {rec.max_tokens} (" in message
    assert message.endswith("--ignore-preflight runs anyway")
    text = "\n".join(report.lines())
    assert "reasoning p50 512, p95 512, max 512" in text and "(max_tokens 512)" in text

    again = run_preflight({"gpu-3": sglang}, _generation(rec.max_tokens, True), gsm8k, timeout_s=60)
    check_preflight(again)
    assert again.passed and again.summary().finish["stop"] >= 24


def test_thinking_without_a_reasoning_parser_names_the_server_flag(
    sglang_no_parser: str, gsm8k: Sample
) -> None:
    report = run_preflight({"gpu-0": sglang_no_parser}, _generation(8192, True), gsm8k, timeout_s=60)
    assert report.summary().reasoning_share == 0.0
    with pytest.raises(PreflightError) as info:
        check_preflight(report)
    message = str(info.value)
    assert "gpu-0: thinking_missing in 32 of 32 results" in message
    assert "--reasoning-parser" in message
    # The same server is fine for a run without thinking.
    check_preflight(run_preflight([sglang_no_parser], _generation(8192, False), gsm8k, timeout_s=60))


def test_every_server_is_judged_and_only_the_failing_one_is_named(sglang: str, sglang_no_parser: str) -> None:
    sample = demo_sample(Settings(), size=12)
    report = run_preflight({"gpu-0": sglang, "gpu-1": sglang_no_parser}, _generation(8192, True), sample,
                           timeout_s=60)  # fmt: skip
    assert [s.name for s in report.servers] == ["gpu-0", "gpu-1"]
    with pytest.raises(PreflightError) as info:
        check_preflight(report)
    assert "1 of 2 server(s) fail the gate" in str(info.value)
    assert "gpu-1: thinking_missing" in str(info.value) and "gpu-0" not in str(info.value)


def test_a_server_that_does_not_answer_is_unavailable_and_named(sglang: str) -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    sample = demo_sample(Settings(), size=2)
    report = run_preflight({"gpu-0": sglang, "gpu-5": url}, _generation(8192, True), sample, timeout_s=2)
    with pytest.raises(UnavailableError) as info:
        check_preflight(report)
    assert "1 of 2 server(s) did not answer" in str(info.value)
    assert f"gpu-5 ({url}): " in str(info.value) and "gpu-0" not in str(info.value)


def test_a_server_that_refuses_every_request_fails_the_gate_not_the_connection() -> None:
    """A 400 on every request (here: the budget does not fit the server's context) is the gate's
    ``error`` class, exit 2, with the server's message; not an unreachable server (exit 3)."""
    sample = demo_sample(Settings(), size=4)
    for url in _simulator("--reasoning-parser", "qwen3", "--context-length", "256"):
        report = run_preflight({"gpu-4": url}, _generation(512, True), sample, timeout_s=60)
        with pytest.raises(PreflightError) as info:
            check_preflight(report)
        assert "gpu-4: error in 4 of 4 results" in str(info.value)
        assert "HTTP 400" in report.summary().errors[0]
        assert "HTTP 400" in "\n".join(report.lines())


@pytest.fixture(scope="module")
def sglang_always_thinks() -> Iterator[str]:
    """A simulated SGLang server whose model reasons whatever ``enable_thinking`` says, until the
    budget is gone (the simulator's ``reasoning_eats_budget`` fault)."""
    yield from _simulator("--reasoning-parser", "qwen3", "--faults", '{"reasoning_eats_budget": true}')


def test_a_model_that_reasons_with_thinking_off_is_caught_with_an_at_least(sglang_always_thinks: str) -> None:
    sample = demo_sample(Settings(), size=4)
    report = run_preflight({"gpu-2": sglang_always_thinks}, _generation(512, False), sample, timeout_s=60)
    rec = report.recommendation()
    assert rec.at_least and rec.retry_budget == 16384, "the fault reasons to any budget"
    with pytest.raises(PreflightError) as info:
        check_preflight(report)
    message = str(info.value)
    assert "ignores enable_thinking=false" in message and "--no-thinking" not in message
    assert "recommended: --max-tokens at least 20480" in message


def test_the_command_prints_json_and_exits_with_the_verdict(
    sglang: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [str(GSM8K), "--prompt-field", "question", "--server", sglang, "--preflight-sample", "8"]
    assert main([*base, "--max-tokens", "512", "--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["passed"] is False and data["max_tokens"] == 512 and data["sample"]["prompts"] == 8
    assert "reasoning_ate_budget" in {b["class"] for b in data["servers"][0]["breaches"]}
    assert data["recommendation"]["max_tokens"] > 512
    assert "preflight refused the run" in captured.err
    assert data["recommendation"]["applies"] and data["servers"][0]["verdict"]["state"] == "refused"
    assert main([*base, "--max-tokens", str(data["recommendation"]["max_tokens"])]) == 0
    # 8 answers cannot show a class under 25% (none of 8 still allows 31%): no verdict, no refusal
    out = capsys.readouterr().out
    assert "  verdict    not enough answers to judge at 95% confidence (8 answers): " in out
    # the run's gate off: the verdict is reported, not enforced (the consumers would not either)
    for extra in ([], ["--json"]):
        assert main([*base, "--max-tokens", "512", "--gate.no-enabled", *extra]) == 0
        captured = capsys.readouterr()
        assert "reasoning_ate_budget" in captured.out + captured.err
        assert "running anyway (the quality gate is off: gate.enabled false)" in captured.out + captured.err


# -- the main job on the test stack ----------------------------------------------------------------


def test_run_refuses_a_budget_reasoning_eats_before_publishing_anything(
    local_stack: LocalStack, kafka: str, s3: str, base_settings: Settings, sglang: str, unique: str
) -> None:
    run_id = f"preflight-{unique}"
    args = [sys.executable, "-m", "launch.run", "--run-id", run_id, "--prompts", str(GSM8K)]
    args += ["--prompt-field", "question", "--server", sglang, "--max-tokens", "512", "--no-progress"]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-4000:]
    assert "preflight: 32 prompts of " in output and "reasoning_ate_budget in" in output
    assert "recommended: --max-tokens " in output and "--ignore-preflight runs anyway" in output
    assert "consumers and sink started" not in output
    topic = f"{run_id}.prompts"
    if asyncio.run(partitions_of(base_settings, topic)):
        assert sum(asyncio.run(end_offsets(base_settings.kafka, topic)).values()) == 0


# -- llama.cpp -------------------------------------------------------------------------------------


def test_llama_cpp_with_thinking_asked_of_a_model_without_it_names_the_fix(llm: list[str]) -> None:
    """The local llama.cpp server (Gemma-3-270M, no thinking mode): thinking asked of it is caught
    (a short budget, and no re-send: a CPU server). Five answers, the fewest whose lower bound
    (55% at 95% confidence) can pass the class's 50%."""
    sample = demo_sample(Settings(), size=5)
    report = run_preflight(llm[:1], _generation(32, True), sample, timeout_s=300, resend=False)
    assert report.servers[0].info is not None and report.servers[0].info.kind == "llama.cpp"
    with pytest.raises(PreflightError, match="thinking_missing in 5 of 5 results") as info:
        check_preflight(report)
    assert "--no-thinking if the model has no thinking mode" in str(info.value)


def test_the_command_refuses_an_input_with_no_prompt_to_check(
    sglang: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0 says the gate passes: with no prompt sent (every line bad, an empty file, standard
    input, which the preflight does not read) nothing was judged, so the command is an input error."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{{{\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for inputs in ([str(bad)], [str(empty)], ["-"]):
        for extra in ([], ["--json"]):
            assert main([*inputs, "--server", sglang, *extra]) == 2, (inputs, extra)
            err = capsys.readouterr().err
            assert "nothing was checked" in err, err
    assert "standard input" in err
