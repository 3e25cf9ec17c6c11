"""The quality gate (a circuit breaker), pure: how a run's results are counted by quality class,
and when their shares say the run must stop.

Every result gets its classes (:func:`streams.quality.result_classes`: its quality flags,
``degenerate``, or ``error`` for a dead letter; the classes: :data:`streams.quality.QUALITY_CLASSES`).
:class:`QualityGate` judges the fleet's counts over a warm-up, then a rolling window; a share trips
when it is strictly above its threshold (1.0 turns a class off). :func:`halt_message` turns the
tripped classes into the cause and the fix a user reads.

Design: docs/gate.md, "Classes" and "When it trips".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from streams.config import GateSettings
from streams.control import Breach, ClassCounts
from streams.quality import DEGENERATE_CLASS, ERROR_CLASS, QUALITY_CLASSES, QualityFlag

__all__ = [
    "QualityGate",
    "breaches",
    "halt_message",
    "tally",
]


def tally(counts: ClassCounts, classes: Iterable[str], results: int = 1) -> ClassCounts:
    """``counts`` with ``results`` more results, each having ``classes``."""
    merged = dict(counts.classes)
    for name in classes:
        merged[name] = merged.get(name, 0) + results
    return ClassCounts(results=counts.results + results, classes=merged)


def breaches(
    counts: ClassCounts,
    thresholds: Mapping[str, float],
    phase: Literal["warmup", "window", "preflight"],
) -> list[Breach]:
    """The classes of ``counts`` whose share of ``counts.results`` is above their threshold (a
    threshold of 1.0 or more never trips), in :data:`streams.quality.QUALITY_CLASSES` order."""
    found: list[Breach] = []
    if counts.results <= 0:
        return found
    for name in QUALITY_CLASSES:
        limit = thresholds.get(name, 1.0)
        count = counts.classes.get(name, 0)
        share = count / counts.results
        if limit < 1.0 and share > limit:
            found.append(
                Breach(
                    cls=name, count=count, results=counts.results, share=share, threshold=limit, phase=phase
                )
            )
    return found


class QualityGate:
    """Judges a fleet's cumulative counts of one gate epoch (docs/gate.md, "When it trips").

    Feed :meth:`judge` the fleet's counts whenever they change; counts only grow within an epoch.
    Start a new :class:`QualityGate` for a new epoch. Memory: the snapshots of the last window.
    """

    def __init__(self, settings: GateSettings) -> None:
        self.settings = settings
        self.thresholds = settings.thresholds()
        self._snapshots: deque[ClassCounts] = deque([ClassCounts()])
        self._warmed_up = False

    def judge(self, fleet: ClassCounts) -> list[Breach]:
        """The classes that trip the gate at ``fleet`` (empty: carry on)."""
        if not self.settings.enabled or fleet.results <= 0:
            return []
        warmup = self.settings.warmup
        if fleet.results < warmup:  # trip only when the full warm-up could not end otherwise
            return [b for b in breaches(fleet, self.thresholds, "warmup") if b.count > b.threshold * warmup]
        phase: Literal["warmup", "window"] = "window" if self._warmed_up else "warmup"
        self._warmed_up = True
        self._snapshots.append(fleet)
        return breaches(
            fleet - self._window_base(fleet.results - self.settings.window), self.thresholds, phase
        )

    def _window_base(self, floor: int) -> ClassCounts:
        """The newest snapshot with at most ``floor`` results (older ones are dropped), else the
        oldest: the window holds the last ``window`` results, or all of them while fewer."""
        while len(self._snapshots) > 1 and self._snapshots[1].results <= floor:
            self._snapshots.popleft()
        return self._snapshots[0]


_FIXES: Final[dict[str, str]] = {
    QualityFlag.REASONING_ATE_BUDGET.value: "raise --max-tokens (kafkagen preflight measures what the "
    "reasoning needs and recommends one), or turn thinking off with --no-thinking",
    QualityFlag.EMPTY_CONTENT.value: "raise --max-tokens if the reasoning used it up; otherwise check the "
    "server's --reasoning-parser and chat template",
    QualityFlag.THINKING_MISSING.value: "start the servers with the model's --reasoning-parser (e.g. qwen3), "
    "or turn thinking off with --no-thinking if the model has no thinking mode",
    QualityFlag.TRUNCATED.value: "raise --max-tokens (kafkagen preflight recommends one)",
    QualityFlag.REPETITION_LOOP.value: "set --repetition-penalty P (above 1 discourages repeats, e.g. "
    "1.1) or raise --generation.temperature, or check the model and its speculative decoding settings",
    QualityFlag.MALFORMED_TOOL_CALL.value: "start the servers with the model's --tool-call-parser",
    QualityFlag.TEMPLATE_LEAK.value: "check the server's chat template (--chat-template) for this model",
    QualityFlag.ECHOED_PROMPT.value: "check the server's chat template and the prompts' format",
    QualityFlag.INVALID_JSON.value: "raise --max-tokens if the answers were cut off (truncated); check that "
    "the servers constrain decoding (SGLang: not --grammar-backend none), or --consumer.retry-invalid K",
    QualityFlag.SCHEMA_MISMATCH.value: "check that the servers honour response_format json_schema (SGLang "
    "does), or --consumer.retry-invalid K",
    QualityFlag.PATTERN_MISMATCH.value: "check that the servers honour regex (an SGLang field), or "
    "--consumer.retry-invalid K",
    ERROR_CLASS: "read the dead letters (topic <run>.errors): each says why its prompt failed",
    DEGENERATE_CLASS: "look at the flagged completions (kafkagen status lists the classes) and fix the "
    "parameters or the servers",
}


_CAUSES: Final = (
    QualityFlag.REASONING_ATE_BUDGET.value,
    QualityFlag.THINKING_MISSING.value,
    QualityFlag.MALFORMED_TOOL_CALL.value,
    QualityFlag.TEMPLATE_LEAK.value,
    QualityFlag.REPETITION_LOOP.value,
    QualityFlag.ECHOED_PROMPT.value,
    QualityFlag.EMPTY_CONTENT.value,
    QualityFlag.TRUNCATED.value,
    ERROR_CLASS,
    DEGENERATE_CLASS,
)
"""The classes from the most specific cause to the least: ``empty_content`` follows from
``reasoning_ate_budget``, ``degenerate`` from any of them, so the fix is the first one's."""


def _breach_text(b: Breach) -> str:
    """``truncated in 30 of 32 results (94% > 50%, warmup)``; with a ``bound``, the bound that
    passed the threshold: ``(94%, lower bound 81% > 50%, preflight)``."""
    passed = f"{b.share:.0%} > " if b.bound is None else f"{b.share:.0%}, lower bound {b.bound:.0%} > "
    return f"{b.cls} in {b.count} of {b.results} results ({passed}{b.threshold:.0%}, {b.phase})"


def halt_message(found: list[Breach], params: Mapping[str, Any]) -> tuple[str, str]:
    """``(reason, fix)`` for the tripped classes ``found`` (non-empty) under generation ``params``
    (``max_tokens``, ``thinking``): one line each, the most specific cause first (its fix). A
    breach with a ``bound`` (a preflight's sample) names the bound that passed the threshold."""
    ordered = sorted(found, key=lambda b: _CAUSES.index(b.cls) if b.cls in _CAUSES else len(_CAUSES))
    parts = [_breach_text(b) for b in ordered]
    setting = f"max_tokens {params.get('max_tokens')}, thinking {'on' if params.get('thinking') else 'off'}"
    reason = f"{'; '.join(parts)} at {setting}"
    return reason, _FIXES.get(ordered[0].cls, _FIXES[DEGENERATE_CLASS])
