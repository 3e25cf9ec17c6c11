"""The faults a running simulator applies: the :class:`~simulator.profile.FaultConfig` as last
set, and the state it arms (503s left, the 503 window, the crash countdown and crash timer).

The engine-side faults (``hang``, ``slow_factor``) are handed to the engine when armed; the
output-side ones (degenerate answers, aborts, ...) are read from :attr:`FaultControl.config` by
whoever plans an answer. Crashing itself is the server's: this module only says when.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from simulator.engine import Engine
from simulator.profile import FaultConfig

__all__ = ["ALL_FAULT_FIELDS", "FaultControl"]

ALL_FAULT_FIELDS = frozenset(f.name for f in fields(FaultConfig))
"""Every :class:`FaultConfig` field name (re-arm them all)."""


class FaultControl:
    """The active faults and their armed state.

    Args:
        config: the faults active from the start.
        on_crash: called (from the event loop) when a ``crash_after_s`` timer fires; the server
            crashes then.
    """

    def __init__(self, config: FaultConfig, on_crash: Callable[[], None]) -> None:
        self.config = config
        self._on_crash = on_crash
        self._error_503_left = 0
        self._error_503_until = -math.inf
        self._crash_countdown: int | None = None
        self._crash_at: float | None = None
        self._crash_timer: asyncio.TimerHandle | None = None

    def arm(self, engine: Engine, changed: set[str] | frozenset[str]) -> None:
        """Apply :attr:`config` to ``engine`` and restart what the ``changed`` fields set: a new
        503 count or window (from the engine's clock now), a new crash countdown or timer."""
        faults = self.config
        engine.set_hang(faults.hang)
        engine.set_slow_factor(faults.slow_factor)
        now = engine.now()
        if "error_503_count" in changed:
            self._error_503_left = faults.error_503_count
        if "error_503_for_s" in changed:
            self._error_503_until = now + faults.error_503_for_s
        if "crash_after_requests" in changed:
            self._crash_countdown = faults.crash_after_requests
        if "crash_after_s" in changed:
            self.disarm_crash_timer()
            if faults.crash_after_s is not None:
                self._crash_at = now + faults.crash_after_s
                delay = engine.wall_seconds(faults.crash_after_s)
                self._crash_timer = asyncio.get_running_loop().call_later(delay, self._on_crash)

    def disarm_crash_timer(self) -> None:
        """Cancel a pending ``crash_after_s`` timer, if any."""
        if self._crash_timer is not None:
            self._crash_timer.cancel()
        self._crash_timer = None
        self._crash_at = None

    def crash_spent(self) -> None:
        """A crash happened: a crash fault fires once, so a restarted server does not crash again."""
        self.disarm_crash_timer()
        self.config = replace(self.config, crash_after_s=None, crash_after_requests=None)
        self._crash_countdown = None

    def count_request(self) -> bool:
        """Count one chat request against ``crash_after_requests``; True when this request is the
        one the server crashes on (the countdown is then spent)."""
        if self._crash_countdown == 0:
            self._crash_countdown = None
            return True
        if self._crash_countdown is not None:
            self._crash_countdown -= 1
        return False

    def take_503(self, now: float) -> bool:
        """Whether a chat request arriving at simulated time ``now`` gets an injected 503 (one of
        ``error_503_count`` is used up, or the ``error_503_for_s`` window is open)."""
        if self._error_503_left > 0 or now < self._error_503_until:
            self._error_503_left = max(0, self._error_503_left - 1)
            return True
        return False

    def state(self, now: float, *, crashed: bool) -> dict[str, Any]:
        """The body of ``GET /simulator/faults``: the config and what is left of it at ``now``
        (simulated seconds)."""
        return {
            "faults": self.config.to_dict(),
            "state": {
                "error_503_remaining": self._error_503_left,
                "error_503_window_left_s": max(0.0, self._error_503_until - now),
                "crash_countdown_requests": self._crash_countdown,
                "crash_in_s": None if self._crash_at is None else max(0.0, self._crash_at - now),
                "crashed": crashed,
            },
        }
