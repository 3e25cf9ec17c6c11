"""The preflight's measurements, pure: what one sample answer was, the distributions over a
server's answers, the ``max_tokens`` they call for (:func:`recommend`), and the words of a refusal
(:func:`refusal`; the verdict itself: :mod:`launch.preflight.verdict`).

Answers are judged with the consumers' own quality flags and the gate's classes
(:func:`streams.quality.result_classes`); percentiles are nearest-rank. The recommendation
(p95 of the tokens needed × :data:`HEADROOM`, rounded up to :data:`ROUND_TO`): docs/main-job.md,
"The preflight".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from consumers.quality.gate import halt_message, tally
from streams.control import Breach, ClassCounts
from streams.quality import QualityFlag, result_classes

__all__ = [
    "HEADROOM",
    "RETRY_FACTOR",
    "RETRY_FLOOR",
    "ROUND_TO",
    "Distribution",
    "Recommendation",
    "SampleAnswer",
    "Summary",
    "percentile",
    "recommend",
    "refusal",
    "retry_budget",
    "summarize",
]

RETRY_FACTOR: Final = 4
"""A cut-off answer is sent again with at least this many times its budget ..."""
RETRY_FLOOR: Final = 16384
"""... and at least this many tokens (a thinking model's reasoning is often several thousand tokens:
4 × a 512-token budget would still cut most of it), within the server's context."""
HEADROOM: Final = 1.25
"""The recommendation is the needed p95 times this (sampling varies the length run to run)."""
ROUND_TO: Final = 256
"""The recommendation is rounded up to a multiple of this many tokens."""


@dataclass(frozen=True)
class SampleAnswer:
    """One prompt of the sample, as one server answered it at the run's settings.

    Attributes:
        prompt_id: the record's id.
        max_tokens: the budget the request asked for (the record's own ``params`` win), tokens.
        finish_reason: the answer's; None when the request failed (``error`` says why).
        prompt_tokens / completion_tokens / reasoning_tokens: the answer's usage, tokens
            (completion includes reasoning; reasoning is 0 when the server does not count it).
        reasoning: whether ``reasoning_content`` came back non-empty.
        content_chars: characters of ``content``.
        flags: the consumer's quality flags (:func:`consumers.quality.flags.answer_flags`); None: failed.
        latency_s: seconds the chat completion took.
        error: the server's error or the transport failure, when there was no answer.
        error_retriable: the error may pass (a transport failure, a timeout, a 5xx: the consumer
            would retry it), as opposed to a request the server refuses (400).
        needed: tokens the prompt needs (reasoning + answer): its completion tokens when it
            finished, else the completion tokens of the re-send (:func:`retry_budget`) when that
            finished; None when unknown.
        needed_at_least: the re-send was cut off too (``needed`` is its budget: a lower bound),
            or was not made or failed (``needed`` is ``max_tokens``).
        resent_at: the budget the re-send asked for, tokens; None when it was not made or failed.
    """

    prompt_id: str
    max_tokens: int
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    reasoning: bool = False
    content_chars: int = 0
    flags: tuple[str, ...] | None = None
    latency_s: float = 0.0
    error: str | None = None
    error_retriable: bool = False
    needed: int | None = None
    needed_at_least: bool = False
    resent_at: int | None = None

    @property
    def truncated(self) -> bool:
        """Cut off at the budget (``finish_reason`` ``length``)."""
        return self.finish_reason == "length"

    @property
    def answer_tokens(self) -> int:
        """Completion tokens that are not reasoning."""
        return max(0, self.completion_tokens - self.reasoning_tokens)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (``0 < q <= 1``) of ``values`` (non-empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Distribution:
    """p50, p95 and max of some values (tokens or seconds), and how many there were."""

    count: int
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """The distribution of ``values`` (all zero when empty)."""
        if not values:
            return cls(0, 0, 0, 0)
        return cls(len(values), percentile(values, 0.5), percentile(values, 0.95), max(values))

    def line(self, unit: str = "") -> str:
        """``p50 X p95 Y max Z`` (whole numbers unless ``unit`` is ``s``)."""

        def fmt(v: float) -> str:
            return f"{v:.1f}{unit}" if unit == " s" else f"{v:.0f}{unit}"

        return f"p50 {fmt(self.p50)}, p95 {fmt(self.p95)}, max {fmt(self.max)}"


@dataclass(frozen=True)
class Recommendation:
    """The ``max_tokens`` the sample calls for.

    Attributes:
        max_tokens: tokens (a multiple of :data:`ROUND_TO`); None when nothing was measured.
        at_least: some answers were still cut off at the larger budget, so they need more.
        needed: the distribution of the tokens the sample needed (lower bounds included).
        resent: answers sent again with a larger budget; ``retry_budget`` the largest budget used.
        still_cut: re-sent answers cut off again (they need more than ``retry_budget``).
        unmeasured: cut-off answers not sent again (no room in the context, a slow server) or whose
            re-send failed: they need more than ``max_tokens``.
        explanation: one line: how the number was reached.
        budget: the largest ``max_tokens`` an answer was cut off at, tokens; None when none was.
    """

    max_tokens: int | None
    at_least: bool
    needed: Distribution
    resent: int
    retry_budget: int | None
    still_cut: int
    unmeasured: int
    explanation: str
    budget: int | None = None

    @property
    def applies(self) -> bool:
        """Whether the recommendation is one to follow: some answers were cut off at their
        ``max_tokens`` and it is larger than the budget they were cut at (answers that all fit
        call for no change, and a p95 under the budget would only lower it)."""
        return self.max_tokens is not None and self.budget is not None and self.max_tokens > self.budget


@dataclass(frozen=True)
class Summary:
    """What a set of sample answers (one server's, or every server's) says.

    Token distributions count answered requests only; ``reasoning_share`` is the share of answered
    requests with ``reasoning_content``.
    """

    results: int
    finish: dict[str, int]
    counts: ClassCounts
    reasoning_share: float
    reasoning_tokens: Distribution
    answer_tokens: Distribution
    latency: Distribution
    max_tokens: int
    errors: tuple[str, ...]

    def lines(self) -> list[str]:
        """The summary for the terminal, one aspect a line, indented two spaces."""
        finish = ", ".join(f"{k} {v}" for k, v in sorted(self.finish.items(), key=lambda kv: -kv[1]))
        classes = ", ".join(f"{k} {v}" for k, v in self.counts.classes.items() if v) or "none"
        answered = self.reasoning_tokens.count
        out = [
            f"  finish     {finish}",
            f"  quality    {classes}",
            f"  reasoning  reasoning_content in {round(self.reasoning_share * answered)} of {answered} "
            f"answers ({self.reasoning_share:.0%})",
            f"  tokens     reasoning {self.reasoning_tokens.line()}; answer {self.answer_tokens.line()} "
            f"(max_tokens {self.max_tokens})",
            f"  latency    {self.latency.line(' s')}",
        ]
        out += [f"  error      {e}" for e in self.errors[:3]]
        return out


def summarize(answers: Sequence[SampleAnswer], max_tokens: int) -> Summary:
    """The :class:`Summary` of ``answers`` sent at ``max_tokens`` (tokens)."""
    counts = ClassCounts()
    for a in answers:
        counts = tally(counts, result_classes(a.flags))
    answered = [a for a in answers if a.finish_reason is not None]
    return Summary(
        results=len(answers),
        finish=dict(Counter(a.finish_reason or "error" for a in answers)),
        counts=ClassCounts(results=counts.results, classes=dict(sorted(counts.classes.items()))),
        reasoning_share=sum(a.reasoning for a in answered) / len(answered) if answered else 0.0,
        reasoning_tokens=Distribution.of([a.reasoning_tokens for a in answered]),
        answer_tokens=Distribution.of([a.answer_tokens for a in answered]),
        latency=Distribution.of([a.latency_s for a in answered]),
        max_tokens=max_tokens,
        errors=tuple(dict.fromkeys(a.error for a in answers if a.error)),
    )


def retry_budget(max_tokens: int, prompt_tokens: int, context_length: int | None) -> int:
    """The budget a cut-off answer is sent again with: ``max(RETRY_FACTOR × max_tokens,
    RETRY_FLOOR)`` tokens, within the server's context (``context_length - prompt_tokens``; a
    server rejects a request whose prompt plus ``max_tokens`` passes it: docs/sglang.md). At most
    ``max_tokens`` when the context leaves no more room (no re-send)."""
    wanted = max(RETRY_FACTOR * max_tokens, RETRY_FLOOR)
    if context_length is not None:
        wanted = min(wanted, context_length - prompt_tokens)
    return max(wanted, max_tokens)


def _round_up(tokens: float) -> int:
    return max(ROUND_TO, math.ceil(tokens / ROUND_TO) * ROUND_TO)


def recommend(answers: Iterable[SampleAnswer]) -> Recommendation:
    """The ``max_tokens`` the answers' needs call for (docs/main-job.md); their ``needed`` and
    ``needed_at_least`` must be filled in (failed requests are left out). It is one to follow
    (:attr:`Recommendation.applies`) only where answers were cut off at their budget."""
    measured = [a for a in answers if a.needed is not None]
    needed = Distribution.of([a.needed or 0 for a in measured])
    budgets = [a.resent_at for a in measured if a.resent_at is not None]
    retry = max(budgets) if budgets else None
    still_cut = sum(a.needed_at_least and a.resent_at is not None for a in measured)
    unmeasured = sum(a.needed_at_least and a.resent_at is None for a in measured)
    cut = [a.max_tokens for a in measured if a.resent_at is not None or a.needed_at_least]
    if not measured:
        return Recommendation(None, False, needed, 0, None, 0, 0, "nothing answered: no max_tokens measured")
    tokens = _round_up(needed.p95 * HEADROOM)
    how = (
        f"p95 of the tokens (reasoning + answer) the {needed.count} sample answers needed ({needed.p95:.0f}) "
        f"x {HEADROOM}, rounded up to {ROUND_TO}"
    )
    if budgets:
        how += f"; the {len(budgets)} cut off at max_tokens were sent again with {retry} to measure it"
    if still_cut:
        how += f"; {still_cut} still cut off at {retry} tokens, so at least that"
    if unmeasured:
        how += f"; {unmeasured} cut off and not measured (not sent again), so at least that"
    at_least = bool(still_cut or unmeasured)
    return Recommendation(
        tokens, at_least, needed, len(budgets), retry, still_cut, unmeasured, how, max(cut) if cut else None
    )


_IGNORED_THINKING_OFF: Final = (
    "the model or its chat template ignores enable_thinking=false (it reasoned with thinking off): "
    "raise --max-tokens to leave room for the answer, or serve a model (or --chat-template) that "
    "honours it"
)


def refusal(found: list[Breach], params: Mapping[str, Any]) -> tuple[str, str]:
    """``(reason, fix)`` for the classes ``found`` at ``params`` (``max_tokens``, ``thinking``):
    :func:`consumers.quality.gate.halt_message`, except that budget eaten by reasoning with thinking
    already off is not told to turn thinking off."""
    reason, fix = halt_message(found, params)
    if not params.get("thinking") and any(b.cls == QualityFlag.REASONING_ATE_BUDGET for b in found):
        fix = _IGNORED_THINKING_OFF
    return reason, fix
