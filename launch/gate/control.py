"""Halting and resuming a run by hand: the gate records ``kafkagen gate halt|resume`` and the main
job write on the run's control topic (:mod:`streams.control`, docs/gate.md).

A halt names the current epoch; a resume starts the next one (``epoch + 1``), whose counts start
from zero. Both read the topic first and write nothing when it would change nothing (halting a
halted run, resuming a running one).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping
from typing import Literal

from consumers.quality.budget import BUDGET_PARAM, budget_halt, deadline_halt, is_budget_halt, projected_halt
from consumers.quality.gate import breaches, halt_message
from streams.config import GenerationSettings, Settings
from streams.control import ControlLog, ControlState, GateRecord, RegenerateRecord, read_control
from streams.errors import ConfigError
from streams.kafka import topic_partitions
from streams.topics import ensure_topics, topic_specs

__all__ = [
    "attempt_params",
    "change_gate",
    "halt_for_budget",
    "halt_if_late",
    "halt_lines",
    "resume_if_halted",
    "unjudged_breach",
]

TIMEOUT_S = 30.0
"""Seconds Kafka gets for each step (topic set-up, reading the topic, the write)."""


async def change_gate(
    settings: Settings, action: Literal["halt", "resume"], reason: str, *, by: str | None = None
) -> tuple[bool, str]:
    """Halt or resume run ``settings.run_id``: ``(changed, the line to print)``. ``by`` names the
    writer in the record (default ``kafkagen gate@<host>``).

    Raises:
        ConfigError: the run has no topic on this Kafka (a mistyped ``--run-id``: halting it
            would report success while the real run goes on).
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    by = by or f"kafkagen gate@{socket.gethostname()}"
    await _check_run_exists(settings)
    await ensure_topics(settings, [topic_specs(settings)["control"]], timeout_s=TIMEOUT_S)
    control = ControlLog(settings)
    try:
        state = await control.start(timeout_s=TIMEOUT_S)
        run = settings.run_id
        if action == "halt":
            if state.halted:
                why = state.gate.reason if state.gate else ""
                return False, f"run {run} is halted already (epoch {state.epoch}): {why}"
            record = GateRecord(
                run_id=run,
                state="halted",
                epoch=state.epoch,
                at=time.time(),
                by=by,
                reason=f"halted by hand: {reason}",
                fix="fix what the reason says",
                counts=state.fleet_gate_counts(),
            )
            done = f"run {run} halted (epoch {state.epoch}): the consumers start no new prompt within seconds"
        else:
            if not state.halted:
                return False, f"run {run} is not halted (epoch {state.epoch}): nothing to resume"
            record = GateRecord(
                run_id=run,
                state="resumed",
                epoch=state.epoch + 1,
                at=time.time(),
                by=by,
                reason=reason,
                counts=state.fleet_gate_counts(),
            )
            done = f"run {run} resumed: gate epoch {state.epoch + 1}, counts from zero"
        async with asyncio.timeout(TIMEOUT_S):
            await control.publish(record)
        return True, done
    finally:
        await control.stop()


async def halt_for_budget(settings: Settings, reason: str, fix: str, *, budget: str, by: str) -> bool:
    """Halt run ``settings.run_id`` for a passed budget (docs/budgets.md): the gate's halt record
    with ``reason``, ``fix`` and ``params[BUDGET_PARAM] = budget``; False when it was halted already.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    control = ControlLog(settings)
    try:
        state = await control.start(timeout_s=TIMEOUT_S)
        if state.halted:
            return False
        record = GateRecord(
            run_id=settings.run_id,
            state="halted",
            epoch=state.epoch,
            at=time.time(),
            by=by,
            reason=reason,
            fix=fix,
            counts=state.fleet_gate_counts(),
            params={BUDGET_PARAM: budget},
        )
        async with asyncio.timeout(TIMEOUT_S):
            await control.publish(record)
        return True
    finally:
        await control.stop()


MIN_PROJECTED_SHARE = 0.01
"""share of the run's results (and at least :data:`MIN_PROJECTED` of them) done before a projected
finish past ``gate.deadline`` halts it: the rate of the first results is the servers' warm-up."""
MIN_PROJECTED = 10


async def halt_if_late(settings: Settings, *, done: int, total: int, results_per_s: float, by: str) -> bool:
    """Halt run ``settings.run_id`` (:func:`halt_for_budget`) when ``done`` of ``total`` results at
    ``results_per_s`` project a finish past ``gate.deadline``, or the deadline is reached; only once
    :data:`MIN_PROJECTED_SHARE` of the run is done (the reached deadline halts at any time). True
    when it wrote the halt.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    gate = settings.gate
    if done < max(MIN_PROJECTED, MIN_PROJECTED_SHARE * total):
        found = deadline_halt(gate)
    else:
        found = projected_halt(gate, done=done, total=total, results_per_s=results_per_s)
    if found is None:
        return False
    return await halt_for_budget(settings, *found, budget="deadline", by=by)


async def _check_run_exists(settings: Settings) -> None:
    """Raise :class:`ConfigError` when none of the run's prompts, completions and control
    topics exists on the Kafka asked (nothing of the run ever ran there)."""
    t = settings.topics
    for topic in (t.control, t.prompts, t.completions):
        if await topic_partitions(settings.kafka, topic, timeout_s=TIMEOUT_S):
            return
    raise ConfigError(
        f"run {settings.run_id!r} not found: Kafka at {settings.kafka.bootstrap_servers} has none of "
        f"{t.prompts}, {t.completions}, {t.control}; nothing was written. Check --run-id and the Kafka "
        "address (KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS)"
    )


async def resume_if_halted(settings: Settings, *, by: str) -> str | None:
    """Resume run ``settings.run_id`` if its gate halted it (what a re-run of the main job with the
    fix does, after its consumers were replaced); the line to print, or None when it was not halted.
    The line warns when ``settings.generation`` has the ``max_tokens`` and thinking the gate halted at
    (and the gate is on: off, it will not halt again).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    state = await read_control(settings, timeout_s=TIMEOUT_S)
    if not state.halted or state.gate is None:
        return None
    gen = settings.generation
    thinking = bool(gen.chat_template_kwargs.get("enable_thinking"))
    halted = state.gate
    _, line = await change_gate(
        settings,
        "resume",
        f"re-run with max_tokens {gen.max_tokens}, thinking {'on' if thinking else 'off'}",
        by=by,
    )
    note = f"run {settings.run_id} was halted ({halted.reason}); {line}"
    # The halt's counts are those at the trip; requests in flight then were written after it and
    # are in the members' last reports of the halted epoch.
    kept = max(halted.counts, state.fleet_gate_counts(), key=lambda c: c.results)
    if kept.results:
        bad = ", ".join(f"{c} {n}" for c, n in sorted(kept.classes.items()) if n) or "none flagged"
        note += (
            f"; the {kept.results} results written before the halt stay in the run with their quality "
            f"flags ({bad}): the export keeps them, tell them by params.max_tokens or quality"
        )
    if is_budget_halt(halted.params):
        tokens = halted.params.get("output_tokens")
        still = budget_halt(settings.gate, tokens if isinstance(tokens, int) else 0) or deadline_halt(
            settings.gate
        )
        if still is not None:
            note += f"; warning: it will halt again at once: {still[0]}. Fix: {still[1]}"
        return note
    same = halted.params.get("max_tokens") == gen.max_tokens and halted.params.get("thinking") == thinking
    if same and settings.gate.enabled:
        note += (
            "; warning: max_tokens and thinking are the ones it halted at: unless the servers changed, "
            "it will halt again"
        )
    return note


def halt_lines(run_id: str, reason: str, fix: str) -> list[str]:
    """What the main job prints when its run is halted (by the gate, or by hand: ``reason`` says
    which): the cause, the fix, how to resume."""
    by_hand = "halted by hand: "
    who = "by hand" if reason.startswith(by_hand) else "by its quality gate"
    return [
        f"error: run {run_id} HALTED {who}: {reason.removeprefix(by_hand)}",
        f"fix: {fix}",
        f"then run the same command with the fix (same --run-id {run_id}): it resumes the run; the "
        "prompts already done are kept, the others are generated with the new settings; add "
        "--no-preflight when only the servers changed "
        f"(kafkagen status --run-id {run_id} shows the run, kafkagen gate status --run-id {run_id} the gate)",
    ]


async def unjudged_breach(settings: Settings) -> tuple[str, str] | None:
    """``(reason, fix)`` when run ``settings.run_id``, done with fewer results than ``gate.warmup``,
    passes its quality gate's thresholds over the current epoch's results although its gate never
    halted it; a run halted and done all the same gives its halt's reason and fix. None when the
    gate is off or the shares are within the thresholds. Why: docs/main-job.md, "Halt and resume".

    An epoch a ``kafkagen regenerate`` started judges that regeneration's attempts: the reason
    names it and the parameters they were generated with (its overrides over the run's settings,
    which the completions' ``params`` carry), and the fix says to regenerate them again with it
    (their overrides outrank a re-run's settings).

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within :data:`TIMEOUT_S` s.
    """
    gate = settings.gate
    state = await read_control(settings, timeout_s=TIMEOUT_S)
    if state.halted and state.gate is not None:
        why = state.gate.reason or "halted by hand"
        return f"(halted, every prompt done by then): {why}", state.gate.fix or "see kafkagen gate status"
    counts = state.fleet_gate_counts()
    if not gate.enabled or counts.results >= gate.warmup:
        return None
    found = breaches(counts, gate.thresholds(), "warmup")
    if not found:
        return None
    regeneration = _regeneration(state)
    overrides = regeneration.overrides if regeneration is not None else {}
    reason, fix = halt_message(found, attempt_params(settings.generation, overrides))
    over = f"over all its {counts.results} results (fewer than the warm-up's {gate.warmup}): {reason}"
    if regeneration is None:
        return over, fix
    asked = ", ".join(f"{k} {v}" for k, v in overrides.items()) or "no override"
    classes = ",".join(dict.fromkeys(b.cls for b in found))
    return (
        f"in its regeneration {regeneration.digest} ({regeneration.ids} prompts re-published with {asked}) "
        + over,
        f"{fix}. The regenerated prompts keep their overrides ({asked}), which outrank a re-run's "
        f"settings: regenerate them with the fix, kafkagen regenerate {settings.run_id} --where "
        f"quality={classes} with its generation flags (--max-tokens, --thinking/--no-thinking, "
        "--temperature, --repetition-penalty, --generation.*), then run the main job again",
    )


def _regeneration(state: ControlState) -> RegenerateRecord | None:
    """The regeneration whose attempts the current gate epoch judges: the one whose resume
    started it (:attr:`streams.control.GateRecord.regeneration`), else None."""
    gate = state.gate
    if gate is None or gate.state != "resumed" or gate.regeneration is None:
        return None
    return state.regenerations.get(gate.regeneration)


def attempt_params(generation: GenerationSettings, overrides: Mapping[str, object]) -> dict[str, object]:
    """The generation parameters a gate message names (``max_tokens`` in tokens, ``thinking``) for
    results generated with ``generation`` and a regeneration's ``overrides`` (its request fields:
    ``max_tokens``, ``chat_template_kwargs``, ...; empty for the run's own attempts)."""
    kwargs = overrides.get("chat_template_kwargs")
    asked = kwargs if isinstance(kwargs, Mapping) else {}
    thinking = asked.get("enable_thinking", generation.chat_template_kwargs.get("enable_thinking"))
    return {"max_tokens": overrides.get("max_tokens", generation.max_tokens), "thinking": bool(thinking)}
