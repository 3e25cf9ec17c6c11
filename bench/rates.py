"""Rate profiles of the rate matrix: simulated servers that complete about 1, 10, 50
and 200 requests per wall second each, from realistic model/GPU/prompt shapes.

A server with ``S`` slots kept full completes ``S / service`` requests per *simulated* second,
``service`` being the mean slot-seconds a request holds at full batch (:mod:`bench.analysis`)::

    service  = prompt_tokens / prefill_tok_s + mean_completion_tokens / rate(S)   (simulated s)
    rate(S)  = r1 / (1 + batch_slowdown (S - 1)),  r1 = mid of [decode_tok_s_min, decode_tok_s_max]
    per-server completions per wall second = time_scale × S / service

``mean_completion_tokens`` is the mean of the simulator's output length, a lognormal with median
``thinking_median_tokens`` (thinking on) or ``no_thinking_median_tokens`` (off) and log-space
sigma ``length_sigma``, cut at the request's ``max_tokens`` (:func:`capped_lognormal_mean`).
Every profile here runs at time scale 1: the rates are real speeds, reached by smaller models
with shorter outputs, not by a faster clock. ``python -m bench.rates`` prints the arithmetic and
the figure planned for the bundled GSM8K prompts (the simulator's exact per-request plan).

| name | model, GPU | slots | r1 (tok/s) | thinking | median / max_tokens | completions/s |
|---|---|---|---|---|---|---|
| 1 | Qwen3-8B, B200 (the default profile) | 16 | 234–256 | on | 1,800 / 4,096 | ~1.1 |
| 10 | Qwen3-8B, B200, short answers | 16 | 234–256 | off | 180 / 512 | ~10 |
| 50 | Qwen3-1.7B, B200 | 32 | 400–440 | off | 90 / 256 | ~50 |
| 200 | Qwen3-0.6B, B200 | 64 | 600–660 | off | 40 / 128 | ~200 |
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from simulator import DEFAULT_PROFILE, SimulatorProfile, estimate_prompt_tokens
from streams.config import GenerationSettings

__all__ = [
    "RATES",
    "RateProfile",
    "capped_lognormal_mean",
    "full_batch_service_s",
    "rate_by_name",
]


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
    """``E[min(X, cap)]`` for ``X`` lognormal with this median and log-space sigma (tokens).

    ``E[X; X < c] = exp(mu + sigma²/2) Φ((ln c - mu - sigma²) / sigma)`` plus ``c P(X >= c)``.
    """
    if sigma <= 0:
        return min(median, cap)
    mu = math.log(median)
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma**2 / 2) * _normal_cdf(z - sigma) + cap * (1.0 - _normal_cdf(z))


def full_batch_service_s(profile: SimulatorProfile, completion_tokens: float, prompt_tokens: float) -> float:
    """Slot-seconds (simulated) one request holds on a full server, at the profile's mid batch-1 rate."""
    full_rate = profile.per_request_rate(profile.max_running_requests)
    return prompt_tokens / profile.prefill_tok_s + completion_tokens / full_rate


@dataclass(frozen=True, slots=True)
class RateProfile:
    """One row of the matrix: the simulated server, the request shape and the time scale.

    Attributes:
        name: the nominal per-server rate, completions per wall second ("1", "10", …).
        description: model and GPU, for the report.
        profile: the simulator's profile.
        thinking: ``enable_thinking`` sent with every request.
        max_tokens: the requests' token budget (reasoning + answer).
        time_scale: simulated seconds per wall second.
        cell_s: wall seconds of ideal work one cell (one client) gets: sets the prompt count.
    """

    name: str
    description: str
    profile: SimulatorProfile
    thinking: bool
    max_tokens: int
    time_scale: float = 1.0
    cell_s: float = 60.0

    @property
    def median_tokens(self) -> float:
        """Median output length before the cap, tokens."""
        p = self.profile
        return p.thinking_median_tokens if self.thinking else p.no_thinking_median_tokens

    @property
    def mean_completion_tokens(self) -> float:
        """Mean output length after the ``max_tokens`` cap, tokens."""
        return capped_lognormal_mean(self.median_tokens, self.profile.length_sigma, self.max_tokens)

    def service_s(self, prompt_tokens: float) -> float:
        """Mean full-batch slot-seconds per request (simulated), prompts of ``prompt_tokens``."""
        return full_batch_service_s(self.profile, self.mean_completion_tokens, prompt_tokens)

    def completion_rate(self, prompt_tokens: float) -> float:
        """Completions per wall second of one server with every slot busy."""
        return self.time_scale * self.profile.max_running_requests / self.service_s(prompt_tokens)

    def lifetime_wall_s(self, prompt_tokens: float) -> float:
        """Wall seconds a request holds its slot at full batch (service / time scale)."""
        return self.service_s(prompt_tokens) / self.time_scale

    def prompts_for(self, servers: int, prompt_tokens: float, cell_s: float | None = None) -> int:
        """Prompts that keep ``servers`` full servers busy for ``cell_s`` wall seconds (ideally)."""
        seconds = self.cell_s if cell_s is None else cell_s
        return max(servers, round(self.completion_rate(prompt_tokens) * servers * seconds))

    def warmup_s(self, prompt_tokens: float) -> float:
        """Simulated seconds after t0 left out of the steady state: 2 request lifetimes, at
        least 5 wall seconds (publishing and the consumers' first fetches)."""
        return max(2 * self.service_s(prompt_tokens), 5.0 * self.time_scale)

    def generation(self, base: GenerationSettings) -> GenerationSettings:
        """``base`` with this row's thinking switch and token budget."""
        kwargs = {**base.chat_template_kwargs, "enable_thinking": self.thinking}
        return base.model_copy(update={"max_tokens": self.max_tokens, "chat_template_kwargs": kwargs})


def _small_model(
    name: str, path: str, slots: int, r1: tuple[float, float], prefill: float, median: float
) -> SimulatorProfile:
    return replace(
        DEFAULT_PROFILE,
        name=name,
        model_path=path,
        served_model_name=path,
        max_running_requests=slots,
        decode_tok_s_min=r1[0],
        decode_tok_s_max=r1[1],
        prefill_tok_s=prefill,
        no_thinking_median_tokens=median,
    )


RATES: tuple[RateProfile, ...] = (
    RateProfile(
        "1", "Qwen3-8B on a B200, thinking on (the default profile)", DEFAULT_PROFILE, True, 4096, cell_s=90
    ),
    RateProfile(
        "10",
        "Qwen3-8B on a B200, thinking off, short answers",
        replace(DEFAULT_PROFILE, name="qwen3-8b-b200-short", no_thinking_median_tokens=180),
        False,
        512,
    ),
    RateProfile(
        "50",
        "Qwen3-1.7B on a B200, thinking off, short answers",
        _small_model("qwen3-1.7b-b200", "Qwen/Qwen3-1.7B", 32, (400, 440), 60_000, 90),
        False,
        256,
    ),
    RateProfile(
        "200",
        "Qwen3-0.6B on a B200, thinking off, one-line answers",
        _small_model("qwen3-0.6b-b200", "Qwen/Qwen3-0.6B", 64, (600, 660), 120_000, 40),
        False,
        128,
        cell_s=30,
    ),
)
"""The matrix's rows, slowest first."""


def rate_by_name(names: Sequence[str]) -> list[RateProfile]:
    """The rows named (e.g. ``["1", "50"]``), in the order given.

    Raises:
        ValueError: a name that is not a row.
    """
    known = {r.name: r for r in RATES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown rate(s) {unknown}; known: {list(known)}")
    return [known[n] for n in names]


def main() -> int:
    """Print each row's arithmetic and the rate planned for the bundled GSM8K prompts."""
    from bench.analysis import plan_work
    from bench.fleet.prompts import make_prompts
    from streams.config import Settings

    prompts = make_prompts(2000)
    prompt_tokens = statistics.fmean(estimate_prompt_tokens(p.messages) for p in prompts)
    base = Settings().generation
    print(f"GSM8K prompts: mean {prompt_tokens:.1f} tokens (estimated)")
    print()
    print(
        "| rate | profile | slots | rate(S) tok/s | mean tokens (formula / planned) | service s "
        "| completions/s (formula / planned) | lifetime, wall |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in RATES:
        work = plan_work(prompts, r.profile, r.generation(base), f"bench-rates-{r.name}")
        planned_tokens = statistics.fmean(w.completion_tokens for w in work)
        planned_rate = (
            r.time_scale * r.profile.max_running_requests / statistics.fmean(w.service_s for w in work)
        )
        p = r.profile
        print(
            f"| {r.name} | {p.name} | {p.max_running_requests} | "
            f"{p.per_request_rate(p.max_running_requests):.1f} | {r.mean_completion_tokens:.0f} / "
            f"{planned_tokens:.0f} | {r.service_s(prompt_tokens):.3f} | "
            f"{r.completion_rate(prompt_tokens):.2f} / {planned_rate:.2f} | "
            f"{r.lifetime_wall_s(prompt_tokens):.2f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
