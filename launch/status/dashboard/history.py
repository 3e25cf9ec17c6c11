"""The dashboard's samples and their ring buffer (pure: no I/O).

A *status* is the dict of ``kafkagen status --json`` (``launch.status.collect.RunStatus.to_dict()``,
schema_version 1); a *sample* is the part of one status the charts plot,
small enough that half an hour of them (360 at one every 5 s) is one quick ``/api/history``
answer. Counts are prompts/records, rates per second, times Unix seconds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["History", "sample_of"]

_SERVER_FIELDS = ("tokens_per_s", "completions_per_s", "running", "slots", "queued", "occupancy", "state")


def _get(data: Mapping[str, Any] | None, *path: str) -> Any:
    """``data[path[0]][path[1]]...``, or ``None`` where a level is missing or null."""
    value: Any = data
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def sample_of(status: Mapping[str, Any]) -> dict[str, Any]:
    """The chart sample of one status dict (the schema's shape; missing parts become ``None``).

    Keys: ``at`` (Unix seconds), ``state``, ``gate`` (the gate state), the prompt counts
    ``published``, ``results``, ``completions``, ``errors``, ``in_s3``, ``exported``,
    ``remaining``; ``tokens_per_s`` and ``completions_per_s`` (fleet totals); ``eta_s`` (seconds);
    ``lag`` (prompts topic, offsets) and ``sink_lag`` (records); ``quality`` (class → count) and
    ``quality_results``; ``servers``: instance → ``tokens_per_s``, ``completions_per_s``,
    ``running``, ``slots``, ``queued``, ``occupancy`` (0..1), ``state``; ``source``: ``"status"``
    (a sample read back from the topics, ``backfill.py``, says ``"topics"``).

    Raises:
        ValueError: the status has no numeric ``at``.
    """
    at = status.get("at")
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise ValueError(f"a status without a time: 'at' is {at!r}")
    prompts = status.get("prompts") or {}
    servers: dict[str, dict[str, Any]] = {}
    for server in status.get("servers") or []:
        name = str(server.get("instance") or server.get("server") or f"server-{len(servers)}")
        servers[name] = {f: server.get(f) for f in _SERVER_FIELDS}
    return {
        "at": float(at),
        "source": "status",
        "state": status.get("state"),
        "gate": _get(status, "gate", "state"),
        **{
            k: prompts.get(k)
            for k in ("published", "results", "completions", "errors", "in_s3", "exported", "remaining")
        },
        "tokens_per_s": _get(status, "rates", "tokens_per_s"),
        "completions_per_s": _get(status, "rates", "completions_per_s"),
        "eta_s": status.get("eta_s"),
        "lag": _get(status, "lag", "total"),
        "sink_lag": _get(status, "lag", "sink", "lag"),
        "quality": dict(_get(status, "quality", "classes") or {}),
        "quality_results": _get(status, "quality", "results"),
        "servers": servers,
    }


class History:
    """The last ``history_s`` seconds of samples, oldest first, taken every ``interval_s`` seconds.

    Holds at most ``ceil(history_s / interval_s) + 1`` samples, and drops those older than
    ``history_s`` before the newest one. Samples must arrive in time order; one not newer than the
    last is ignored (the same status collected twice).

    Raises:
        ValueError: ``interval_s`` or ``history_s`` not positive.
    """

    def __init__(self, *, history_s: float = 1800.0, interval_s: float = 5.0) -> None:
        if not (interval_s > 0 and history_s > 0):
            raise ValueError(f"history_s and interval_s must be > 0 (got {history_s}, {interval_s})")
        self.history_s = history_s
        self.interval_s = interval_s
        self._samples: deque[dict[str, Any]] = deque(maxlen=math.ceil(history_s / interval_s) + 1)
        self._seed: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._seed) + len(self._samples)

    @property
    def seeded(self) -> int:
        """How many samples :meth:`seed` gave (0 before it)."""
        return len(self._seed)

    def seed(self, samples: list[dict[str, Any]]) -> None:
        """Put the run's past before the collected samples (``backfill.topic_history``'s, oldest
        first): those older than the first collected one are kept, whatever their age (the run's
        history, not the last ``history_s``), and replace an earlier seed."""
        first = self._samples[0]["at"] if self._samples else float("inf")
        self._seed = [s for s in samples if s["at"] < first]

    def add(self, sample: dict[str, Any]) -> bool:
        """Append ``sample`` (a :func:`sample_of` dict); returns whether it was kept."""
        if self._samples and sample["at"] <= self._samples[-1]["at"]:
            return False
        self._samples.append(sample)
        oldest = sample["at"] - self.history_s
        while self._samples and self._samples[0]["at"] < oldest:
            self._samples.popleft()
        return True

    def since(self, at: float | None = None) -> list[dict[str, Any]]:
        """The samples newer than ``at`` (Unix seconds; ``None``: all of them, the seed's first),
        oldest first."""
        samples = [*self._seed, *self._samples]
        return samples if at is None else [s for s in samples if s["at"] > at]
