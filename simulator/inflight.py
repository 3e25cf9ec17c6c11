"""The chat requests a server is answering, by ``rid``, and SGLang's abort semantics over them.

SGLang 0.5.20 / 0.5.23 (paths under ``python/sglang/srt/``): ``/abort_request {rid}`` does
nothing unless ``rid`` is in flight (``managers/tokenizer_manager.py`` ``abort_request`` returns
early with one tokenizer worker); then the scheduler aborts every request whose rid *starts
with* it (``managers/scheduler.py`` ``abort_request``: ``req.rid.startswith``). A client
disconnect aborts the same way.
"""

from __future__ import annotations

from simulator.engine import Engine, Job

__all__ = ["InflightRequests"]


class InflightRequests:
    """``rid`` → the engine job answering it, while its handler waits."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def __contains__(self, rid: object) -> bool:
        return rid in self._jobs

    def add(self, rid: str, job: Job) -> None:
        """Register ``job`` as the answer to ``rid``."""
        self._jobs[rid] = job

    def remove(self, rid: str, job: Job) -> None:
        """Forget ``rid`` if ``job`` is still the one registered for it."""
        if self._jobs.get(rid) is job:
            del self._jobs[rid]

    def abort_all(self, engine: Engine) -> None:
        """``/abort_request {"abort_all": true}``: abort every request in flight."""
        for job in list(self._jobs.values()):
            engine.cancel(job, "abort_request")

    def abort_matching(self, rid: str, engine: Engine, *, sparing: Job | None = None) -> bool:
        """``/abort_request {rid}``: abort every request in flight whose rid starts with ``rid``
        (but ``sparing``), if ``rid`` itself is in flight (or ``sparing`` is given: a
        disconnecting request, which aborts itself its own way).

        Returns whether an abort was sent (the tokenizer counts those).
        """
        if sparing is None and rid not in self._jobs:
            return False
        for other, job in list(self._jobs.items()):
            if other.startswith(rid) and job is not sparing:
                engine.cancel(job, "abort_request")
        return True
