"""What a simulated server reports about itself beyond the engine's own counters: the
``/metrics`` gauges as SGLang's scheduler last logged them, the tokenizer's counters (aborts
sent, cached prompt tokens) and the requests the server refused.

Reset with every (re)start, like a fresh server process.
"""

from __future__ import annotations

from simulator.engine import Engine
from simulator.shapes import Counters, GaugeSnapshot

__all__ = ["Telemetry"]


class Telemetry:
    """Counters and gauges of one server run (see the module docstring)."""

    gauges: GaugeSnapshot
    known_priorities: set[int | None]
    """Every request ``priority`` seen (each gets its ``/metrics`` series from then on)."""
    aborts_sent: int
    """Aborts the tokenizer sent (``/abort_request`` that matched, client disconnects)."""
    cached_tokens_total: int
    """Prompt tokens served from the prefix cache, over admitted requests."""
    admitted_prompt_tokens: int
    """Prompt tokens of every admitted request."""
    rejected: int
    """Chat requests answered with an error status (400, 503)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to a fresh server's zeros."""
        self.gauges = GaugeSnapshot()
        self.known_priorities = set()
        self.aborts_sent = self.cached_tokens_total = self.admitted_prompt_tokens = self.rejected = 0
        self._gauge_tick = -1

    def admitted(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count a request the engine took: its prompt and cached tokens."""
        self.cached_tokens_total += cached_tokens
        self.admitted_prompt_tokens += prompt_tokens

    def refresh_gauges(self, engine: Engine) -> GaugeSnapshot:
        """The gauges as SGLang's scheduler last logged them (see :attr:`Engine.log_tick`).

        Lazy: a snapshot is taken when read after a log step, with the values at read time
        (not at the step itself); between log steps the gauges keep their last values.
        """
        engine.sync()
        if engine.log_tick != self._gauge_tick:
            self._gauge_tick = engine.log_tick
            running, queued = engine.by_priority("running"), engine.by_priority("queued")
            self.known_priorities |= set(running) | set(queued) | engine.seen_priorities
            admitted = self.admitted_prompt_tokens
            self.gauges = GaugeSnapshot(
                running=engine.running,
                queued=engine.queued,
                running_by_priority=running,
                queued_by_priority=queued,
                token_usage=round(engine.token_usage(), 2),
                gen_throughput=engine.gen_throughput(),
                cache_hit_rate=self.cached_tokens_total / admitted if admitted else 0.0,
            )
        return self.gauges

    def counters(self, engine: Engine) -> Counters:
        """The tokenizer's counters now (``/metrics``): the engine's finished requests and
        tokens, and this server's cached tokens and aborts."""
        return Counters(
            prompt_tokens=engine.finished_prompt_tokens,
            generation_tokens=engine.finished_generation_tokens,
            cached_tokens=self.cached_tokens_total,
            requests=engine.finished_requests,
            aborted=self.aborts_sent,
        )
