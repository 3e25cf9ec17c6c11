"""Pure arithmetic of the fleet benchmark: the work each prompt costs, the ideal makespan, and
slot occupancy from the simulators' time-integrated counters.

Definitions (all times in *simulated* seconds unless a name ends in ``_wall``):

* **Service time** of a prompt: the slot-seconds it needs on a server whose every slot is busy,
  under the simulator's batching model: ``prompt_tokens / prefill_tok_s + completion_tokens /
  rate(16)`` with ``rate(b) = r1 / (1 + alpha (b - 1))`` and ``r1`` the request's own batch-1
  rate (234–256 tok/s, drawn per request by the simulator). ``completion_tokens`` and ``r1``
  are the simulator's own plan for the prompt's ``rid`` (:func:`simulator.plan_output`),
  so the benchmark knows the exact work before it runs.
* **Ideal makespan** = total service time / (servers × slots). A server's throughput in these
  full-batch slot-seconds is ``b (1 + 15 alpha) / (1 + alpha (b - 1))`` per second with ``b``
  requests running, which grows with ``b`` and reaches ``slots`` only at ``b = slots``: no
  schedule can do better, so this is a lower bound (it ignores the one-off 5 s warm-up of each
  server and the unavoidable drain at the end). The token-based figure, total tokens /
  (servers × full-batch throughput at the profile's mid rate), is reported next to it; the two
  differ only by the spread of per-request rates (~0.1 %).
* **Occupancy** of a server over an interval = (integral of running requests) / (interval ×
  ``max_running_requests``), from :meth:`SimulatorStats.occupancy_since` on two snapshots.
* **Steady state** of a server = from ``t0 + warmup`` to the last snapshot taken before the
  server received its last request. After that the client has nothing left to give it (ours:
  its partition is exhausted; baseline: every prompt is dispatched) and the server drains; that
  tail is judged by the makespan, not by the occupancy figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator import (
    SimulatorProfile,
    SimulatorStats,
    estimate_prompt_tokens,
    plan_output,
    request_seed,
)
from streams.config import GenerationSettings
from streams.records import PromptRecord

__all__ = [
    "Sample",
    "ServerWindow",
    "Work",
    "first_attempt_rid",
    "ideal_makespan",
    "plan_work",
    "refill_latencies",
    "run_occupancy",
    "steady_window",
    "token_ideal_makespan",
]


@dataclass(frozen=True, slots=True)
class Work:
    """What one prompt costs on the simulated fleet.

    Attributes:
        prompt_id: the prompt's id.
        prompt_tokens: prompt length as the simulator estimates it.
        completion_tokens: tokens the simulator will generate for it (reasoning + answer).
        base_rate: its batch-1 decode rate, tokens/s.
        service_s: slot-seconds at full batch (see the module docstring).
    """

    prompt_id: str
    prompt_tokens: int
    completion_tokens: int
    base_rate: float
    service_s: float


def first_attempt_rid(run_id: str, prompt: PromptRecord) -> str:
    """The ``rid`` the generation consumer sends on a prompt's first attempt.

    The simulator's output (length, rate) is a function of the ``rid``; the baseline sends the
    same ``rid`` so both clients get exactly the same work.
    """
    return f"{run_id}-{prompt.id}-{prompt.attempt}-1"


def plan_work(
    prompts: Sequence[PromptRecord],
    profile: SimulatorProfile,
    generation: GenerationSettings,
    run_id: str,
) -> list[Work]:
    """The simulator's plan for each prompt's first attempt, and its full-batch service time."""
    thinking = bool(generation.chat_template_kwargs.get("enable_thinking", profile.default_enable_thinking))
    out: list[Work] = []
    for prompt in prompts:
        budget = prompt.params.max_tokens or generation.max_tokens
        plan = plan_output(
            profile,
            seed=request_seed(first_attempt_rid(run_id, prompt), prompt.messages, profile.seed),
            enable_thinking=thinking,
            budget=budget,
            tools=prompt.tools or (),
        )
        prompt_tokens = estimate_prompt_tokens(prompt.messages, prompt.tools or ())
        full_rate = profile.per_request_rate(profile.max_running_requests, plan.base_rate)
        service = prompt_tokens / profile.prefill_tok_s + plan.completion_tokens / full_rate
        out.append(Work(prompt.id, prompt_tokens, plan.completion_tokens, plan.base_rate, service))
    return out


def ideal_makespan(work: Sequence[Work], servers: int, slots: int) -> float:
    """Total full-batch service time / (servers × slots), simulated seconds."""
    return sum(w.service_s for w in work) / (servers * slots)


def token_ideal_makespan(work: Sequence[Work], servers: int, profile: SimulatorProfile) -> float:
    """Total generated tokens / (servers × full-batch throughput at the mid batch-1 rate)."""
    full = profile.total_throughput(profile.max_running_requests)
    return sum(w.completion_tokens for w in work) / (servers * full)


@dataclass(frozen=True, slots=True)
class Sample:
    """The stats of every server, read at one instant (``mono``: the bench's monotonic clock)."""

    mono: float
    stats: tuple[SimulatorStats, ...]


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """One server's steady state.

    Attributes:
        start_s / end_s: the window, simulated seconds after t0.
        occupancy: mean running / slots over the window (0–1).
        mean_queued: mean waiting requests over the window.
        full_fraction: share of the snapshots in the window with every slot running.
    """

    start_s: float
    end_s: float
    occupancy: float
    mean_queued: float
    full_fraction: float

    @property
    def span_s(self) -> float:
        """Length of the window, simulated seconds."""
        return self.end_s - self.start_s


def steady_window(
    samples: Sequence[Sample], server: int, *, t0_mono: float, warmup_s: float, time_scale: float
) -> ServerWindow | None:
    """Server ``server``'s steady state (see the module docstring); None if it is empty.

    ``samples`` are in time order and cover the whole phase (the last one after the drain).
    """
    if not samples:
        return None
    start_mono = t0_mono + warmup_s / time_scale
    first = next((s for s in samples if s.mono >= start_mono), None)
    final_received = samples[-1].stats[server].requests_received
    last = None
    for s in samples:
        if s.stats[server].requests_received < final_received:
            last = s
    if first is None or last is None or last.mono <= first.mono:
        return None
    a, b = first.stats[server], last.stats[server]
    span = b.elapsed_s - a.elapsed_s
    inside = [s for s in samples if first.mono <= s.mono <= last.mono]
    full = sum(1 for s in inside if s.stats[server].running >= s.stats[server].max_running_requests)
    return ServerWindow(
        start_s=(first.mono - t0_mono) * time_scale,
        end_s=(last.mono - t0_mono) * time_scale,
        occupancy=b.occupancy_since(a),
        mean_queued=(b.queued_request_seconds - a.queued_request_seconds) / span if span > 0 else 0.0,
        full_fraction=full / len(inside),
    )


def run_occupancy(start: SimulatorStats, end: SimulatorStats, makespan_s: float) -> float:
    """Occupancy over the whole makespan: running request-seconds between two snapshots that
    bracket the run (the server idles outside it) / (makespan × slots)."""
    used = end.running_request_seconds - start.running_request_seconds
    return used / (makespan_s * end.max_running_requests) if makespan_s > 0 else 0.0


def refill_latencies(sends: Sequence[float], finishes: Sequence[float]) -> tuple[int, list[float]]:
    """How long a client took to put a new request on a server after one finished.

    With a window of ``W`` requests, the ``(W + j)``-th send can only follow the ``j``-th finish,
    so its delay is ``send[W + j] - finish[j]`` (both sorted; any clock, seconds). ``W`` is read
    from the data: the sends before the first finish. For the generation consumer the delay
    covers writing the completion to Kafka (acks=all), its fetch loop noticing the free room,
    and fetching the next record.

    Returns:
        ``W`` and the delays, in send order.
    """
    s, f = sorted(sends), sorted(finishes)
    if not f:
        return 0, []
    window = sum(1 for x in s if x < f[0])
    return window, [s[window + j] - f[j] for j in range(len(s) - window)]
