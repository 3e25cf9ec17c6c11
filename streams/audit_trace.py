"""The fault audit's trace: what a generation consumer or the sink did, and when, for the audit
(``python -m bench.chaos``) to judge against Kafka and S3. Off unless configured.

``KAFKAGEN_AUDIT_TRACE=<folder>`` makes each process append one JSON object a line to its own
``<folder>/<role>-<pid>-<start ns>.jsonl`` (a new file even when a pid is reused), one ``write(2)``
on an ``O_APPEND`` descriptor a line; every line has ``t`` (``time.monotonic()``, seconds) and
``e``, the event (why it survives a SIGKILL, the clock, the events and their fields: docs/chaos.md).
A write that fails (disk full) turns the trace off rather than failing the product; the audit then
finds commits it cannot vouch for.

``KAFKAGEN_AUDIT_PLANT=<name>[,<name>...]`` makes the product break one of its guarantees on
purpose, so the audit can be seen to catch it (:data:`PLANTS`); only with the trace on (plants
without a trace are refused). Never set outside the audit's tests.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from pathlib import Path
from typing import Final

from streams.errors import ConfigError

__all__ = ["PLANTS", "PLANT_ENV", "TRACE_ENV", "AuditTrace", "audit_trace"]

TRACE_ENV: Final = "KAFKAGEN_AUDIT_TRACE"
PLANT_ENV: Final = "KAFKAGEN_AUDIT_PLANT"
PLANTS: Final = ("commit_before_ack", "resend", "commit_before_upload")
"""``commit_before_ack``: the consumer lets a prompt's offset be committed, then writes its result
a commit interval later; ``resend``: the consumer writes every 10th prompt's result twice, with no
handover or retry behind it; ``commit_before_upload``: the sink commits a batch's offsets, then
uploads it."""


class AuditTrace:
    """One process's trace (module docstring); every method is a no-op when it is off.

    Args:
        folder: where the trace goes (None: off).
        role: ``generate`` or ``sink``: the file's name is ``<role>-<pid>-<start ns>.jsonl``.
        plants: planted violations (:data:`PLANTS`).

    Raises:
        ConfigError: an unknown plant, plants without a trace folder, or a folder that cannot be
            written.
    """

    def __init__(self, folder: str | None, role: str, plants: frozenset[str] = frozenset()) -> None:
        unknown = sorted(plants - set(PLANTS))
        if unknown:
            raise ConfigError(f"{PLANT_ENV}: unknown {', '.join(unknown)}; known: {', '.join(PLANTS)}")
        if plants and not folder:
            raise ConfigError(f"{PLANT_ENV} is set without {TRACE_ENV}: a planted violation must be traced")
        self.plants = plants
        self._fd: int | None = None
        if folder:
            path = Path(folder) / f"{role}-{os.getpid()}-{time.monotonic_ns()}.jsonl"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except OSError as exc:
                raise ConfigError(f"{TRACE_ENV}: cannot write the audit trace {path}: {exc}") from None

    @property
    def on(self) -> bool:
        return self._fd is not None

    def event(self, e: str, **fields: object) -> None:
        """Append event ``e`` with ``fields`` (JSON values) at ``time.monotonic()``; never raises."""
        if self._fd is None:
            return
        line = json.dumps({"t": time.monotonic(), "e": e, **fields}, separators=(",", ":")) + "\n"
        try:
            os.write(self._fd, line.encode())
        except OSError:
            self._fd = None  # the audit sees the commits it cannot vouch for

    def planted(self, name: str) -> bool:
        """Whether violation ``name`` (:data:`PLANTS`) is planted."""
        return name in self.plants


@cache
def audit_trace(role: str) -> AuditTrace:
    """This process's trace for ``role``, from ``KAFKAGEN_AUDIT_TRACE`` and ``KAFKAGEN_AUDIT_PLANT``
    (call it at start-up, so a bad setting stops the process before it does anything).

    Raises:
        ConfigError: as :class:`AuditTrace`.
    """
    plants = frozenset(p for p in os.environ.get(PLANT_ENV, "").split(",") if p)
    return AuditTrace(os.environ.get(TRACE_ENV) or None, role, plants)
