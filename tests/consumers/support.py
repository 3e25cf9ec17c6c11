"""What the generation consumer's process tests share: the consumer fleet of a test, reading its
output topics back, and waiting for prompts to finish."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from streams.config import Settings
from streams.records import CompletionRecord, ErrorRecord
from tests.helpers import read_topic, sigkill, spawn, wait_for

TIME_SCALE = 20.0
"""Simulated seconds per wall second: a 300-token answer takes ~0.06 s."""


class Fleet:
    """Consumer processes of one test; all are SIGKILLed at the end."""

    def __init__(self, settings: Settings, logs: Path) -> None:
        self.settings = settings
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, server: str) -> subprocess.Popen[bytes]:
        proc = spawn(
            ["-m", "consumers.generate", "--server", server, "--instance-id", name],
            self.settings,
            self.logs / f"{name}.log",
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        sigkill(self.procs.pop(name))

    def assert_alive(self) -> None:
        """Fail at once, with the end of its log, when a consumer exited that the test did not stop."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = (self.logs / f"{name}.log").read_text(errors="replace")
                tail = "\n".join(log.splitlines()[-15:])
                raise AssertionError(
                    f"consumer {name} exited with {proc.returncode}; end of its log:\n{tail}"
                )

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def completions(s: Settings) -> list[CompletionRecord]:
    return await read_topic(s, s.topics.completions, CompletionRecord)


async def errors(s: Settings) -> list[ErrorRecord]:
    return await read_topic(s, s.topics.errors, ErrorRecord)


async def wait_all_done(
    s: Settings, ids: set[str], timeout_s: float, fleet: Fleet | None = None
) -> tuple[Counter[str], Counter[str]]:
    """Wait until every id has a completion or error record; return (completion, error) counts by id.
    With ``fleet``, fail as soon as one of its consumers has exited."""
    counts: list[tuple[Counter[str], Counter[str]]] = []

    async def check() -> bool:
        if fleet is not None:
            fleet.assert_alive()
        c = Counter(r.id for r in await completions(s))
        e = Counter(r.id for r in await errors(s))
        counts.append((c, e))
        return ids <= set(c) | set(e)

    await wait_for(check, timeout_s=timeout_s, what=f"{len(ids)} prompts to finish", interval_s=0.5)
    return counts[-1]


async def wait_settled(s: Settings) -> None:
    """Wait until what a killed consumer wrote is readable: two reads of the completions agree."""
    counts: list[int] = []

    async def settled() -> bool:
        counts.append(len(await completions(s)))
        return len(counts) > 1 and counts[-1] == counts[-2]

    await wait_for(settled, timeout_s=30, what="the killed consumer's results to be readable", interval_s=0.5)
