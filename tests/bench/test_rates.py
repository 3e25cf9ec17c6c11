"""The rate matrix's pure parts: profile → completion-rate arithmetic, least-outstanding routing,
the running limit a plain client learns, and the matrix's verdicts. No timing assertions."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from bench.analysis import plan_work
from bench.baseline import LeastOutstanding, learn_running_limit
from bench.fleet.prompts import make_prompts
from bench.matrix import Cell, highest_driven_rate, summary_table, with_strong_ratio
from bench.rates import RATES, capped_lognormal_mean, full_batch_service_s, rate_by_name
from simulator import DEFAULT_PROFILE
from streams.config import GenerationSettings

# -- rate arithmetic ----------------------------------------------------------------------------------


def test_capped_lognormal_mean_matches_a_sample_and_its_limits() -> None:
    rng = random.Random(1)
    draws = [rng.lognormvariate(math.log(300), 0.6) for _ in range(200_000)]
    assert capped_lognormal_mean(300, 0.6, 512) == pytest.approx(
        statistics.fmean(min(x, 512) for x in draws), rel=0.01
    )
    assert capped_lognormal_mean(300, 0.6, 1e12) == pytest.approx(300 * math.exp(0.18))
    assert capped_lognormal_mean(300, 0.0, 100) == 100
    assert capped_lognormal_mean(300, 0.6, 1) == pytest.approx(1, rel=1e-3)


def test_the_default_profile_completes_slots_times_full_batch_rate_over_mean_tokens() -> None:
    row = rate_by_name(["1"])[0]
    assert row.profile == DEFAULT_PROFILE and row.time_scale == 1
    # 16 slots × 140 tok/s (= 245 / (1 + 0.05 × 15)) / mean output tokens, prefill aside
    expected = 16 * 140.0 / row.mean_completion_tokens
    assert row.completion_rate(0) == pytest.approx(expected)
    assert row.completion_rate(66) < expected
    assert row.lifetime_wall_s(66) == pytest.approx(16 / row.completion_rate(66))


def test_time_scale_and_slots_multiply_the_wall_rate() -> None:
    row = rate_by_name(["10"])[0]
    faster = dataclasses.replace(row, time_scale=4.0)
    assert faster.completion_rate(66) == pytest.approx(4 * row.completion_rate(66))
    assert faster.warmup_s(66) >= 2 * faster.service_s(66)
    doubled = dataclasses.replace(row.profile, max_running_requests=32)
    # twice the slots, but each request slower at the larger batch
    assert full_batch_service_s(doubled, 100, 0) > full_batch_service_s(row.profile, 100, 0)


def test_the_rows_are_near_their_nominal_rates_by_formula_and_by_the_simulators_plan() -> None:
    prompts = make_prompts(400)
    base = GenerationSettings()
    for row in RATES:
        nominal = float(row.name)
        assert row.completion_rate(66) == pytest.approx(nominal, rel=0.12)
        gen = row.generation(base)
        assert gen.max_tokens == row.max_tokens
        assert gen.chat_template_kwargs["enable_thinking"] is row.thinking
        work = plan_work(prompts, row.profile, gen, f"test-{row.name}")
        planned = (
            row.time_scale * row.profile.max_running_requests / statistics.fmean(w.service_s for w in work)
        )
        assert planned == pytest.approx(row.completion_rate(66), rel=0.08)
        assert row.prompts_for(2, 66) == round(row.completion_rate(66) * 2 * row.cell_s)


def test_unknown_rate_names_are_refused() -> None:
    assert [r.name for r in rate_by_name(["200", "1"])] == ["200", "1"]
    with pytest.raises(ValueError, match="unknown rate"):
        rate_by_name(["3"])


# -- least-outstanding routing ------------------------------------------------------------------------


def test_routing_fills_the_least_outstanding_server_up_to_its_limit() -> None:
    router = LeastOutstanding([2, 3])
    picks = [router.acquire() for _ in range(6)]
    assert picks == [1, 0, 1, 0, 1, None]  # ties go to the server with more room
    assert router.outstanding == [2, 3]
    router.release(0)
    assert router.acquire() == 0
    assert router.acquire() is None


def test_a_freed_request_is_refilled_on_the_server_that_freed_it() -> None:
    router = LeastOutstanding([4, 4, 4])
    for _ in range(12):
        router.acquire()
    for k in (2, 0, 2, 1):
        router.release(k)
        assert router.acquire() == k


def test_routing_prefers_the_emptier_server_whatever_its_index() -> None:
    router = LeastOutstanding([5, 5])
    for _ in range(6):
        router.acquire()
    router.release(1)
    router.release(1)
    assert router.acquire() == 1
    with pytest.raises(ValueError, match="no request outstanding"):
        LeastOutstanding([1]).release(0)
    with pytest.raises(ValueError, match="limit"):
        LeastOutstanding([0, 2])


def test_the_running_limit_comes_from_server_info_else_the_fallback() -> None:
    info = {"internal_states": [{"effective_max_running_requests_per_dp": 48, "max_running_requests": 16}]}
    assert learn_running_limit(info, 16) == 48
    assert learn_running_limit({"internal_states": [{"max_running_requests": 16}]}, 12) == 12
    assert learn_running_limit({"internal_states": []}, 12) == 12
    assert learn_running_limit(None, 12) == 12
    assert learn_running_limit({"internal_states": [{"effective_max_running_requests_per_dp": None}]}, 7) == 7


# -- matrix verdicts ----------------------------------------------------------------------------------


def _cell(rate: str, phase: str, steady: float | None, makespan: float) -> Cell:
    return Cell(rate, phase, 10, 10, 0, 1.0, 1.0, steady, makespan, 1.0, 1.0, 0, 0, 0, 0.1, 0.1, None, 1.0)


def test_ratios_are_to_the_strong_baseline_of_the_row() -> None:
    row = with_strong_ratio([_cell("1", "ours", 1.0, 102.0), _cell("1", "strong", 1.0, 100.0)])
    assert [c.over_strong for c in row] == [pytest.approx(1.02), pytest.approx(1.0)]
    assert with_strong_ratio([_cell("1", "ours", 1.0, 5.0)])[0].over_strong is None


def test_the_highest_driven_rate_is_the_last_row_whose_strong_baseline_holds_98_percent() -> None:
    cells = [
        _cell("1", "strong", 0.999, 1),
        _cell("10", "ours", 0.5, 1),
        _cell("10", "strong", 0.985, 1),
        _cell("50", "strong", 0.97, 1),
        _cell("200", "strong", None, 1),
    ]
    assert highest_driven_rate(cells) == "10"
    assert highest_driven_rate(cells[3:]) is None


def test_the_summary_gives_each_clients_mean_and_range_over_the_repeats() -> None:
    cells = [
        *with_strong_ratio([_cell("1", "ours", 1.0, 103.0), _cell("1", "strong", 1.0, 100.0)]),
        *with_strong_ratio([_cell("1", "ours", 1.0, 99.0), _cell("1", "strong", 1.0, 100.0)]),
    ]
    lines = summary_table(cells)
    assert lines[2] == "| 1 | ours | 2 | 1.010 (0.990–1.030) | 1.000 (1.000–1.000) |"
    assert lines[3].startswith("| 1 | strong | 2 | 1.000 (1.000–1.000) |")
