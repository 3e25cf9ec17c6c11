"""A run's budgets: the total output tokens (``gate.max_output_tokens``) and the deadline
(``gate.deadline``) past which the quality gate halts it (docs/budgets.md). Pure: the counts come
from the consumers' reports (:mod:`consumers.quality.fleet_gate`) or the main job's progress."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from pydantic import AwareDatetime, TypeAdapter, ValidationError

from streams.config import GateSettings

__all__ = [
    "BUDGET_PARAM",
    "budget_halt",
    "deadline_halt",
    "is_budget_halt",
    "parse_deadline",
    "projected_halt",
]

BUDGET_PARAM = "budget"
"""The key of a halt record's ``params`` that marks a budget halt (its value: ``output_tokens`` or
``deadline``); a quality halt has none."""

_RESUME = "; re-run the same command with it (same --run-id): the run resumes where it stopped"


def budget_halt(gate: GateSettings, output_tokens: int) -> tuple[str, str] | None:
    """``(reason, fix)`` when ``output_tokens`` (the run's completion tokens summed over every
    completion) reached ``gate.max_output_tokens``; None below it or without a budget."""
    budget = gate.max_output_tokens
    if budget is None or output_tokens < budget:
        return None
    return (
        f"output token budget {budget:,} reached: {output_tokens:,} tokens",
        f"raise --max-output-tokens above {output_tokens:,} (the setting gate.max_output_tokens, "
        f"KAFKAGEN_GATE__MAX_OUTPUT_TOKENS){_RESUME}",
    )


def deadline_halt(gate: GateSettings, now: datetime | None = None) -> tuple[str, str] | None:
    """``(reason, fix)`` when ``gate.deadline`` is reached at ``now`` (default: the clock);
    None before it or without a deadline."""
    deadline = gate.deadline
    now = now or datetime.now(UTC)
    if deadline is None or now < deadline:
        return None
    return f"deadline {_when(deadline)} reached", f"give a later --deadline{_RESUME}"


def projected_halt(
    gate: GateSettings, *, done: int, total: int, results_per_s: float, now: datetime | None = None
) -> tuple[str, str] | None:
    """``(reason, fix)`` when the run's projected finish passes ``gate.deadline``: ``total - done``
    results still to come at ``results_per_s`` (the fleet's rate). None without a deadline, with
    nothing left, or with no rate yet (no projection: only the deadline itself halts then)."""
    deadline = gate.deadline
    now = now or datetime.now(UTC)
    if deadline is None:
        return None
    reached = deadline_halt(gate, now)
    if reached is not None:
        return reached
    left = total - done
    if left <= 0 or results_per_s <= 0:
        return None
    finish = now.timestamp() + left / results_per_s
    if finish <= deadline.timestamp():
        return None
    return (
        f"projected finish {_when(datetime.fromtimestamp(finish, UTC))} passes the deadline "
        f"{_when(deadline)}: {left:,} of {total:,} results to come at {results_per_s:.2f}/s",
        f"give a later --deadline, or add servers (kafkagen scale){_RESUME}",
    )


def is_budget_halt(params: dict[str, object]) -> bool:
    """Whether a halt record's ``params`` are a budget halt's (:data:`BUDGET_PARAM`)."""
    return BUDGET_PARAM in params


def _when(at: datetime) -> str:
    """``at`` as ISO 8601 UTC to the second."""
    return at.astimezone(UTC).isoformat(timespec="seconds")


def parse_deadline(text: str, now: datetime | None = None) -> datetime:
    """``--deadline``: an ISO 8601 time with its zone (``2026-12-08T06:00:00Z``), or a duration
    from ``now`` (default: the clock): ISO 8601 (``PT2H30M``, ``P1DT2H``), its short form without
    the ``PT`` (``2h``, ``90m``, ``1h30m``), ``HH:MM:SS`` or seconds. Parsed by pydantic
    (``AwareDatetime``, ``timedelta``).

    Raises:
        ValueError: none of these; the message says what is accepted.
    """
    now = now or datetime.now(UTC)
    text = text.strip()
    short = "PT" + text.upper() if text[:1].isdigit() and text[-1:].isalpha() else text
    candidates: list[object] = [text, short]
    with contextlib.suppress(ValueError):
        candidates.insert(0, float(text))  # seconds (a string of digits pydantic takes for a time)
    for candidate in candidates:
        try:
            delta = TypeAdapter(timedelta).validate_python(candidate)
        except ValidationError:
            continue
        if delta.total_seconds() <= 0:
            raise ValueError(f"deadline {text!r}: a duration must be positive")
        return now + delta
    try:  # after the durations: pydantic would read a bare number as Unix seconds
        return TypeAdapter(AwareDatetime).validate_python(text)
    except ValidationError:
        pass
    raise ValueError(
        f"deadline {text!r}: give a time with its zone (2026-12-08T06:00:00Z, ISO 8601) or a duration "
        "(2h, 1h30m, PT2H, 02:00:00, seconds)"
    )
