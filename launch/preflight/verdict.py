"""The preflight's verdict, pure: the gate's thresholds judged on a sample with a stated confidence.

A sample of 32 answers (or 4) is not the run: its share of a class is an estimate, and the gate's
"share above the threshold" applied to it as if it were the run gives a verdict that changes from
one sample to the next. So each class's rate gets one-sided Clopper-Pearson bounds at
:data:`CONFIDENCE` (:func:`rate_bounds`), and a server's sample is

- **refused** when some class's *lower* bound is above its threshold: the run would trip the gate;
- **ok** when every class's *upper* bound is at or under its threshold: it would not;
- **undecided** otherwise: not enough answers to judge (the run's own gate judges its warm-up).

Why Clopper-Pearson (the "exact" bounds, from the binomial distribution itself): a refusal stops
a run, so it must keep its promise at every sample size and rate: a server whose true rate is at
the threshold is refused with probability at most ``1 - CONFIDENCE``, never more. The Wilson score
bound does not: its one-sided coverage falls short for small samples and small rates (the 95%
Wilson lower bound of 3 of 12 is just above 10%, and a server at a true 10% gives 3 or more of 12
answers 11% of the time; Brown, Cai and DasGupta, "Interval Estimation for a Binomial Proportion",
Statistical Science 16(2), 2001). The price is bounds a little wider than needed.
docs/main-job.md, "The preflight".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from streams.control import Breach, ClassCounts
from streams.quality import QUALITY_CLASSES

__all__ = ["CONFIDENCE", "ClassVerdict", "Verdict", "binomial_tail", "judge", "rate_bounds"]

CONFIDENCE: Final = 0.95
"""Each bound is one-sided at this confidence: a class is refused when its rate is above its
threshold with at least this probability, and within when it is at or under it likewise."""

ClassState = Literal["over", "within", "undecided"]
VerdictState = Literal["refused", "ok", "undecided"]

_SHOWN: Final = 3
"""Classes a verdict line names (the rest are counted)."""


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz's
    method; Press et al., Numerical Recipes, 3rd ed., section 6.4), for ``x < (a + 1) / (a + b + 2)``."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` (``a, b > 0``, ``x`` in [0, 1])."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def binomial_tail(count: int, results: int, rate: float) -> float:
    """``P(X >= count)`` for ``X`` binomial over ``results`` trials of probability ``rate``
    (``I_rate(count, results - count + 1)``; 1 for ``count`` 0)."""
    if count <= 0:
        return 1.0
    if count > results:
        return 0.0
    return _incomplete_beta(count, results - count + 1, rate)


def _solve(increasing: Callable[[float], float], target: float) -> float:
    """The rate in [0, 1] where ``increasing`` (a continuous increasing function of it) reaches
    ``target``, by bisection to float precision."""
    low, high = 0.0, 1.0
    for _ in range(64):
        middle = (low + high) / 2
        if increasing(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def rate_bounds(count: int, results: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """``(lower, upper)``: the one-sided Clopper-Pearson bounds, each at ``confidence``, on the rate
    of something seen in ``count`` of ``results`` trials (shares in [0, 1]). Whatever the true rate,
    it is below ``lower`` (above ``upper``) with probability at most ``1 - confidence``: ``lower``
    is the rate at which ``count`` or more would be seen with probability ``1 - confidence`` (0
    when ``count`` is 0), ``upper`` the rate at which ``count`` or fewer would (1 when ``count``
    is ``results``).

    Raises:
        ValueError: ``results`` is not positive, ``count`` is outside [0, results], or
            ``confidence`` is outside (0.5, 1).
    """
    if results <= 0 or not 0 <= count <= results:
        raise ValueError(f"rate_bounds: {count} of {results}")
    if not 0.5 < confidence < 1:
        raise ValueError(f"rate_bounds: confidence {confidence} is not in (0.5, 1)")
    alpha = 1.0 - confidence
    lower = 0.0 if count == 0 else _solve(lambda p: binomial_tail(count, results, p), alpha)
    upper = 1.0 if count == results else _solve(lambda p: binomial_tail(count + 1, results, p), confidence)
    return lower, upper


@dataclass(frozen=True)
class ClassVerdict:
    """One class of one sample against its threshold.

    Attributes:
        cls: the gate's class (:data:`streams.quality.QUALITY_CLASSES`).
        count: answers of the sample that have it; ``results`` the sample's answers.
        threshold: the gate's maximum share for it (``gate.max_<class>``), below 1.
        lower / upper: the one-sided bounds on its rate (:func:`rate_bounds`), shares.
    """

    cls: str
    count: int
    results: int
    threshold: float
    lower: float
    upper: float

    @property
    def share(self) -> float:
        """``count / results``."""
        return self.count / self.results

    @property
    def state(self) -> ClassState:
        """``over``: the lower bound is above the threshold; ``within``: the upper bound is at or
        under it; else ``undecided``."""
        if self.lower > self.threshold:
            return "over"
        if self.upper <= self.threshold:
            return "within"
        return "undecided"

    def breach(self) -> Breach:
        """The class as a gate :class:`streams.control.Breach` (phase ``preflight``, ``bound`` the
        lower bound), for :func:`consumers.quality.gate.halt_message`."""
        return Breach(
            cls=self.cls,
            count=self.count,
            results=self.results,
            share=self.share,
            threshold=self.threshold,
            phase="preflight",
            bound=self.lower,
        )

    def text(self) -> str:
        """``repetition_loop 6 of 32 (19%, bounds 9%-33%, max 25%)``."""
        return (
            f"{self.cls} {self.count} of {self.results} ({self.share:.0%}, bounds {self.lower:.0%}-"
            f"{self.upper:.0%}, max {self.threshold:.0%})"
        )


@dataclass(frozen=True)
class Verdict:
    """A sample judged class by class (:func:`judge`) at ``confidence``; ``results`` answers.
    ``classes`` holds every class the gate judges (threshold below 1), in the gate's order."""

    confidence: float
    results: int
    classes: tuple[ClassVerdict, ...]

    @property
    def over(self) -> list[ClassVerdict]:
        """The classes whose lower bound is above their threshold."""
        return [c for c in self.classes if c.state == "over"]

    @property
    def undecided(self) -> list[ClassVerdict]:
        """The classes neither over nor within, most often seen first."""
        return sorted((c for c in self.classes if c.state == "undecided"), key=lambda c: -c.count)

    @property
    def state(self) -> VerdictState:
        """``refused`` (a class is over), ``ok`` (every class within), else ``undecided`` (also
        with no answer at all)."""
        if self.over:
            return "refused"
        if self.results and not self.undecided:
            return "ok"
        return "undecided"

    def breaches(self) -> list[Breach]:
        """The classes over their threshold, as gate breaches (empty: not refused)."""
        return [c.breach() for c in self.over]

    def line(self) -> str:
        """The verdict's line, without the refusal's reason (:func:`launch.preflight.stats.refusal`
        words that): ``ok at 95% confidence ...`` or ``not enough answers to judge ...``."""
        at = f"at {self.confidence:.0%} confidence"
        if self.state == "refused":
            return f"over the gate's thresholds {at} (a class's lower bound above its maximum)"
        if self.state == "ok":
            if not self.classes:
                return "ok: the gate judges no class (every gate.max_* is 1.0)"
            seen = [c for c in self.classes if c.count]
            closest = (
                f"closest: {max(seen, key=lambda c: c.upper - c.threshold).text()}"
                if seen
                else f"no class seen in {self.results} answers, upper bound {self.classes[0].upper:.0%}"
            )
            return f"ok {at}: every class's upper bound within its maximum ({closest})"
        if not self.results:
            return "not enough answers to judge: none"
        seen = [c for c in self.undecided if c.count]
        unseen = [c for c in self.undecided if not c.count]
        parts = [c.text() for c in seen[:_SHOWN]]
        if len(seen) > _SHOWN:
            parts.append(f"{len(seen) - _SHOWN} more")
        if unseen:
            names = ", ".join(f"{c.cls} {c.threshold:.0%}" for c in unseen[:_SHOWN])
            names += ", ..." if len(unseen) > _SHOWN else ""
            parts.append(
                f"{len(unseen)} classes never seen, whose upper bound {unseen[0].upper:.0%} is still above "
                f"their maximum ({names})"
            )
        return (
            f"not enough answers to judge {at} ({self.results} answers): {'; '.join(parts)}; a larger "
            "--preflight-sample decides, else the run's gate judges its warm-up"
        )


def judge(counts: ClassCounts, thresholds: Mapping[str, float], confidence: float = CONFIDENCE) -> Verdict:
    """The :class:`Verdict` on a sample's ``counts`` (the gate's classes of its answers) against
    ``thresholds`` (``{class: max share}``; a class at 1.0 or missing is not judged)."""
    results = counts.results
    classes: list[ClassVerdict] = []
    for name in QUALITY_CLASSES if results > 0 else ():
        limit = thresholds.get(name, 1.0)
        if limit >= 1.0:
            continue
        count = counts.classes.get(name, 0)
        lower, upper = rate_bounds(count, results, confidence)
        classes.append(ClassVerdict(name, count, results, limit, lower, upper))
    return Verdict(confidence, results, tuple(classes))
