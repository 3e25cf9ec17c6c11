"""The simulated inference engine: continuous batching, event-driven.

Model (all times in simulated seconds, see ``time_scale``):

* At most ``max_running_requests`` requests hold a slot; the others wait in an unbounded
  FIFO queue and are admitted the moment a slot frees (SGLang's default: no
  ``--max-queued-requests``).
* An admitted request first prefills for ``prompt_tokens / prefill_tok_s`` seconds (plus
  ``warmup_s`` for the first request after start), then decodes its planned tokens.
* While ``b`` requests hold slots, each decodes at ``r1 / (1 + alpha * (b - 1)) / slow``
  tokens/s, ``r1`` being the request's own batch-1 rate, ``alpha`` the profile's
  ``batch_slowdown`` and ``slow`` the ``slow_factor`` fault. Requests still prefilling
  count in ``b`` (they hold a slot) but produce no tokens.
* KV-cache capacity never limits admission (no retraction is simulated).
* Decode steps: while any request decodes, the engine counts decode iterations at the
  batch's per-request rate (one iteration = one token per running request). Together with
  admissions (prefill batches) they drive :attr:`Engine.log_tick`, which the server uses to
  refresh its ``/metrics`` gauges the way SGLang's scheduler does (SGLang 0.5.20
  python/sglang/srt/managers/scheduler_components/metrics_reporter.py ``report_decode_stats``:
  every ``decode_log_interval`` decode steps; ``report_prefill_stats``: every prefill batch).

One asyncio task owns the clock. Between two events (an arrival, an admission, a prefill
ending, a request finishing, an abort, a fault change) every rate is constant, so the
engine computes when the next event happens and sleeps until then; on waking it replays
the events in order, exactly, however late the wake-up was. Nothing sleeps per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from simulator.profile import SimulatorProfile

__all__ = ["Engine", "Job", "JobState", "SimulatorStats"]

_EPSILON_TOKENS = 1e-6
_EPSILON_S = 1e-9

JobState = Literal["waiting", "running", "completed", "cancelled"]


@dataclass(eq=False)
class Job:
    """One request inside the engine (mutable; owned by the engine).

    Attributes:
        prompt_tokens: prompt length, tokens.
        target_tokens: tokens to decode before the request completes.
        base_rate: decode rate at batch size 1, tokens/s.
        probe: a ``/health_generate`` probe; left out of the request counters.
        ends_in_abort: the planned output ends with ``finish_reason: "abort"`` (abort fault):
            counted as aborted, not finished, when it completes.
        state: waiting, running, completed or cancelled.
        cancel_reason: why it was cancelled ("disconnect", "abort_request", "shutdown").
        decoded: tokens decoded so far (fractional between events).
        prefill_left_s: prefill seconds still to run.
        cached_tokens: leading prompt tokens already in the prefix cache: not prefilled again.
        submitted_at / admitted_at / finished_at: simulated timestamps, seconds since start.
        priority: the request's ``priority`` (for the per-priority metric series), or None.
        done: resolved (with ``None``) when the job completes or is cancelled.
    """

    prompt_tokens: int
    target_tokens: int
    base_rate: float
    probe: bool
    ends_in_abort: bool
    done: asyncio.Future[None]
    submitted_at: float
    priority: int | None = None
    cached_tokens: int = 0
    state: JobState = "waiting"
    cancel_reason: str | None = None
    decoded: float = 0.0
    prefill_left_s: float = 0.0
    admitted_at: float | None = None
    finished_at: float | None = None

    @property
    def queue_s(self) -> float:
        """Seconds spent waiting for a slot (so far, if still waiting)."""
        end = self.admitted_at if self.admitted_at is not None else self.finished_at
        return (end if end is not None else self.submitted_at) - self.submitted_at

    @property
    def tokens(self) -> int:
        """Whole tokens decoded so far."""
        return math.floor(self.decoded + _EPSILON_TOKENS)


@dataclass(frozen=True, slots=True)
class SimulatorStats:
    """A snapshot of the engine's counters. Times are simulated seconds.

    Attributes:
        elapsed_s: seconds since the engine (re)started.
        running: requests holding a slot now.
        queued: requests waiting for a slot now.
        max_running_requests: the number of slots.
        requests_received: generation requests accepted into the engine.
        requests_started: requests admitted to a slot.
        requests_finished: requests that ended with stop, length or tool_calls.
        requests_aborted: requests ended by an abort (fault, ``/abort_request``, client
            disconnect, crash or shutdown).
        requests_rejected: requests answered 400 or 503 before reaching the engine.
        prompt_tokens_total: prompt tokens of admitted requests.
        generation_tokens_total: output tokens produced.
        gen_throughput: current decode rate of the whole server, tokens/s.
        running_request_seconds: integral of ``running`` over time (request-seconds).
        queued_request_seconds: integral of ``queued`` over time (request-seconds).
    """

    elapsed_s: float
    running: int
    queued: int
    max_running_requests: int
    requests_received: int
    requests_started: int
    requests_finished: int
    requests_aborted: int
    requests_rejected: int
    prompt_tokens_total: int
    generation_tokens_total: int
    gen_throughput: float
    running_request_seconds: float
    queued_request_seconds: float

    @property
    def mean_running(self) -> float:
        """Time-weighted mean number of running requests since start."""
        return self.running_request_seconds / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mean_queued(self) -> float:
        """Time-weighted mean number of queued requests since start."""
        return self.queued_request_seconds / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def occupancy(self) -> float:
        """Mean slot occupancy since start, 0–1 (``mean_running / max_running_requests``)."""
        return self.mean_running / self.max_running_requests

    def occupancy_since(self, earlier: SimulatorStats) -> float:
        """Mean slot occupancy (0–1) between the snapshot ``earlier`` and this one."""
        span = self.elapsed_s - earlier.elapsed_s
        if span <= 0:
            return self.running / self.max_running_requests
        used = self.running_request_seconds - earlier.running_request_seconds
        return used / span / self.max_running_requests


class Engine:
    """Continuous-batching scheduler over simulated time (see the module docstring).

    Args:
        profile: slots, rates, prefill and warm-up.
        time_scale: simulated seconds per wall-clock second.
        clock: wall clock in seconds (monotonic); injectable for tests.
    """

    def __init__(
        self,
        profile: SimulatorProfile,
        *,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
        self.profile = profile
        self.time_scale = time_scale
        self._clock = clock
        self._wall_start = clock()
        self._last = 0.0
        self._running: list[Job] = []
        self._waiting: deque[Job] = deque()
        self._warm = False
        self._hang = False
        self._slow_factor = 1.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.received = self.started = self.completed = self.aborted = 0
        self.prompt_tokens_total = 0
        self._generated = 0.0
        self._running_area = 0.0
        self._queued_area = 0.0
        self._decode_iters = 0.0
        self._prefill_batches = 0
        self.seen_priorities: set[int | None] = set()
        self.finished_requests = 0
        self.finished_prompt_tokens = 0
        self.finished_generation_tokens = 0

    # -- clock -------------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the engine was created."""
        return (self._clock() - self._wall_start) * self.time_scale

    def wall_seconds(self, simulated_s: float) -> float:
        """Wall-clock seconds that ``simulated_s`` simulated seconds take."""
        return simulated_s / self.time_scale

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler task (needs a running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="simulator-engine")

    async def close(self) -> None:
        """Stop the scheduler and cancel every job (reason "shutdown")."""
        if self.closed:
            return
        self.sync()
        self.closed = True
        for job in [*self._running, *self._waiting]:
            self._cancel(job, "shutdown")
        self._running.clear()
        self._waiting.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- requests ----------------------------------------------------------------------

    def submit(
        self,
        *,
        prompt_tokens: int,
        target_tokens: int,
        base_rate: float,
        probe: bool = False,
        ends_in_abort: bool = False,
        priority: int | None = None,
        cached_tokens: int = 0,
    ) -> Job:
        """Queue a request of ``prompt_tokens`` that decodes ``target_tokens`` at ``base_rate``
        tokens/s (batch 1); it is admitted as soon as a slot is free and prefills the prompt but
        its first ``cached_tokens``."""
        self.sync()
        job = Job(
            prompt_tokens=prompt_tokens,
            target_tokens=max(0, target_tokens),
            base_rate=base_rate,
            probe=probe,
            ends_in_abort=ends_in_abort,
            done=asyncio.get_running_loop().create_future(),
            submitted_at=self._last,
            priority=priority,
            cached_tokens=min(max(0, cached_tokens), prompt_tokens),
        )
        if self.closed:
            self._cancel(job, "shutdown")
            return job
        if not probe:
            self.received += 1
        self._waiting.append(job)
        self._admit()
        self._wakeup.set()
        return job

    def cancel(self, job: Job, reason: str) -> bool:
        """Abort a waiting or running job, freeing its slot. ``False`` if it had already ended."""
        self.sync()  # first: catching up may complete the job (then it is in neither list)
        if job.state in ("completed", "cancelled"):
            return False
        if job.state == "running":
            self._running.remove(job)
        else:
            self._waiting.remove(job)
        self._cancel(job, reason)
        self._admit()
        self._wakeup.set()
        return True

    def set_hang(self, hang: bool) -> None:
        """Freeze (``True``) or resume the engine; time spent frozen produces nothing."""
        self.sync()
        self._hang = hang
        self._wakeup.set()

    def set_slow_factor(self, factor: float) -> None:
        """Divide every decode rate by ``factor`` from now on."""
        self.sync()
        self._slow_factor = factor
        self._wakeup.set()

    # -- observation -------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Requests holding a slot (after :meth:`sync`)."""
        return len(self._running)

    @property
    def queued(self) -> int:
        """Requests waiting for a slot (after :meth:`sync`)."""
        return len(self._waiting)

    @property
    def hung(self) -> bool:
        """Whether a ``hang`` fault has the engine frozen."""
        return self._hang

    @property
    def log_tick(self) -> int:
        """Grows by one at each admission (prefill batch) and every ``decode_log_interval``
        decode steps (call :meth:`sync` first): when SGLang's scheduler would log its stats."""
        return self._prefill_batches + math.floor(self._decode_iters / self.profile.decode_log_interval)

    def by_priority(self, which: Literal["running", "queued"]) -> dict[int | None, int]:
        """Requests running (or waiting) per ``priority`` (probes left out)."""
        jobs = self._running if which == "running" else self._waiting
        counts: dict[int | None, int] = {}
        for job in jobs:
            if not job.probe:
                counts[job.priority] = counts.get(job.priority, 0) + 1
        return counts

    @property
    def elapsed_s(self) -> float:
        """Simulated seconds simulated so far (call :meth:`sync` first)."""
        return self._last

    @property
    def running_request_seconds(self) -> float:
        """Integral of the running count over simulated time, request-seconds."""
        return self._running_area

    @property
    def queued_request_seconds(self) -> float:
        """Integral of the queue length over simulated time, request-seconds."""
        return self._queued_area

    @property
    def generated_tokens(self) -> float:
        """Output tokens produced so far (fractional; call :meth:`sync` first)."""
        return self._generated

    def gen_throughput(self) -> float:
        """Current decode rate of the whole server, tokens/s."""
        return sum((self._rate(job) for job in self._running if job.prefill_left_s <= _EPSILON_S), 0.0)

    def token_usage(self) -> float:
        """Fraction of the KV cache in use: prompt plus decoded tokens of running requests."""
        used = sum(job.prompt_tokens + job.decoded for job in self._running)
        return min(1.0, used / self.profile.max_total_num_tokens)

    def sync(self) -> None:
        """Bring the simulation up to the current time (idempotent; wakes the scheduler)."""
        if not self.closed:
            self._advance_to(self.now())
            self._wakeup.set()

    # -- simulation --------------------------------------------------------------------

    def _rate(self, job: Job) -> float:
        if self._hang:
            return 0.0
        return self.profile.per_request_rate(len(self._running), job.base_rate) / self._slow_factor

    def _event_times(self) -> list[tuple[Job, float, bool]]:
        """Each running job's next event: (job, simulated time, whether it is a prefill end)."""
        if self._hang:
            return []
        times = []
        for job in self._running:
            if job.prefill_left_s > _EPSILON_S:
                times.append((job, self._last + job.prefill_left_s, True))
            else:
                remaining = max(0.0, job.target_tokens - job.decoded)
                times.append((job, self._last + remaining / self._rate(job), False))
        return times

    def _next_event(self) -> float:
        """Simulated time of the next prefill end or completion (``inf``: none pending)."""
        return min((at for _, at, _ in self._event_times()), default=math.inf)

    def _progress(self, dt: float) -> None:
        self._running_area += len(self._running) * dt
        self._queued_area += len(self._waiting) * dt
        if self._hang:
            return
        if any(job.prefill_left_s < dt for job in self._running):
            mid = (self.profile.decode_tok_s_min + self.profile.decode_tok_s_max) / 2
            self._decode_iters += (
                dt * self.profile.per_request_rate(len(self._running), mid) / self._slow_factor
            )
        for job in self._running:
            decode_s = dt
            if job.prefill_left_s > 0:
                spent = min(dt, job.prefill_left_s)
                job.prefill_left_s -= spent
                decode_s -= spent
            if decode_s > 0:
                step = min(self._rate(job) * decode_s, job.target_tokens - job.decoded)
                job.decoded += step
                self._generated += step

    def _advance_to(self, t: float) -> None:
        """Replay every event up to simulated time ``t``, in order."""
        while True:
            times = self._event_times()
            event = min((at for _, at, _ in times), default=math.inf)
            step_end = min(event, t)
            if step_end > self._last:
                self._progress(step_end - self._last)
                self._last = step_end
            if event > t:
                return
            for job, at, prefill_end in times:  # snap the jobs whose event this is (no float residue)
                if at <= event:
                    if prefill_end:
                        job.prefill_left_s = 0.0
                    else:
                        self._generated += job.target_tokens - job.decoded
                        job.decoded = float(job.target_tokens)
            self._finish_ready()

    def _finish_ready(self) -> None:
        finished = [
            job
            for job in self._running
            if job.prefill_left_s <= _EPSILON_S and job.target_tokens - job.decoded <= _EPSILON_TOKENS
        ]
        for job in finished:
            self._running.remove(job)
            job.prefill_left_s = 0.0
            job.decoded = float(job.target_tokens)
            job.state = "completed"
            job.finished_at = self._last
            if not job.probe:
                if job.ends_in_abort:
                    self.aborted += 1
                else:
                    self.completed += 1
                self._count_finished(job)
            if not job.done.done():
                job.done.set_result(None)
        self._admit()

    def _count_finished(self, job: Job) -> None:
        """SGLang counts a request in ``num_requests_total`` and the token counters when its
        last output arrives, aborted or not (SGLang 0.5.20
        python/sglang/srt/observability/metrics_collector.py ``observe_one_finished_request``)."""
        self.finished_requests += 1
        self.finished_prompt_tokens += job.prompt_tokens
        self.finished_generation_tokens += job.tokens

    def _admit(self) -> None:
        if self._waiting and len(self._running) < self.profile.max_running_requests:
            self._prefill_batches += 1
        while self._waiting and len(self._running) < self.profile.max_running_requests:
            job = self._waiting.popleft()
            job.state = "running"
            job.admitted_at = self._last
            job.prefill_left_s = (job.prompt_tokens - job.cached_tokens) / self.profile.prefill_tok_s
            if not self._warm:
                job.prefill_left_s += self.profile.warmup_s
                self._warm = True
            if not job.probe:
                self.seen_priorities.add(job.priority)
                self.started += 1
                self.prompt_tokens_total += job.prompt_tokens
            self._running.append(job)

    def _cancel(self, job: Job, reason: str) -> None:
        if job.state == "running" and not job.probe:
            # A running request aborted still ends through the scheduler's output path, so it
            # is counted; one aborted while waiting is answered by the tokenizer and is not.
            self._count_finished(job)
        job.state = "cancelled"
        job.cancel_reason = reason
        job.finished_at = self._last
        if not job.probe:
            self.aborted += 1
        if not job.done.done():
            job.done.set_result(None)

    async def _run(self) -> None:
        while True:
            now = self.now()
            self._advance_to(now)
            delay = self.wall_seconds(self._next_event() - now)
            self._wakeup.clear()
            # A hung engine with no timer still wakes on submit, cancel or fault change.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(delay) else max(0.0, delay)):
                    await self._wakeup.wait()
