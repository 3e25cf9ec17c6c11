"""The main job follows its run's fleet record: one ``consumers.generate`` program per server.

:class:`FleetWatch` runs in a thread of the main job beside its progress wait and, every
``interval_s``, makes the supervisord programs match the latest
:class:`streams.control.FleetRecord` (level-triggered): a program added and started per new server,
one stopped with SIGTERM and then removed per server that left; the sink is never touched. The
rules: docs/runs.md, "Scaling a running run".
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import xmlrpc.client
from collections.abc import Callable, Sequence

from aiokafka.errors import KafkaError

from launch.scale.policy import program_name
from launch.supervise import Program, Supervisor
from streams.config import Settings
from streams.control import ControlLog, FleetRecord
from streams.errors import KafkagenError

__all__ = ["CONSUMER_PREFIX", "FleetWatch"]

CONSUMER_PREFIX = "generate-"
"""The name prefix of the consumers' supervisord programs (:func:`launch.scale.policy.program_name`)."""

_DOWN = ("STOPPED", "EXITED", "FATAL", "UNKNOWN")
"""supervisord states of a program that does not run (and will not by itself, but EXITED, which
autorestart restarts unless the program was stopped)."""


class FleetWatch:
    """Keeps the consumers of ``supervisor`` matching run ``settings.run_id``'s fleet record.

    Args:
        settings: the run's settings (``kafka``, ``topics.control``).
        supervisor: the main job's supervisord, started with one program per server in ``servers``.
        servers: the servers whose consumers run now (the fleet the job started).
        make_program: the program of a server's consumer (:func:`launch.scale.policy.consumer_program`).
        echo: prints one line.
        interval_s: seconds between two turns.

    Use: :meth:`start`, then :meth:`stop` before the supervisord is shut down.
    """

    def __init__(
        self,
        settings: Settings,
        supervisor: Supervisor,
        *,
        servers: Sequence[str],
        make_program: Callable[[str], Program],
        echo: Callable[[str], None] = print,
        interval_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.make_program = make_program
        self.echo = echo
        self.interval_s = interval_s
        self.urls = {program_name(u): u for u in servers}
        """program name -> server URL of every consumer program the watch knows."""
        self.wanted = dict(self.urls)
        """program name -> server URL of the fleet being applied."""
        self.stopping: set[str] = set()
        """programs this watch asked to stop and has not removed yet."""
        self.fleet: FleetRecord | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = ""

    def start(self) -> None:
        """Start watching in a daemon thread."""
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main()), name="fleet-watch", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop watching and wait for the thread (at most ``timeout_s`` seconds); programs are left
        as they are (the caller shuts supervisord down)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    async def _main(self) -> None:
        control = ControlLog(self.settings, write=False)
        try:
            while not self._stop.is_set():
                try:
                    await control.start(timeout_s=30.0)
                    break
                except (KafkaError, TimeoutError, OSError) as exc:
                    await control.stop()
                    self._warn(f"fleet: cannot read {self.settings.topics.control} ({exc!r}); retrying")
                    await asyncio.sleep(2.0)
            while not self._stop.is_set():
                try:
                    async with asyncio.timeout(30.0):
                        await control.poll(timeout_ms=int(self.interval_s * 1000))
                except (KafkaError, TimeoutError, OSError) as exc:
                    self._warn(f"fleet: cannot read {self.settings.topics.control} ({exc!r}); retrying")
                    await asyncio.sleep(self.interval_s)
                fleet = control.state.fleet
                if fleet is not None and fleet.run_id == self.settings.run_id:
                    self.take(fleet)
                self.turn()
        finally:
            await control.stop()

    def take(self, fleet: FleetRecord) -> None:
        """Make ``fleet`` the fleet to apply (when it is newer than the one applied)."""
        if self.fleet is not None and fleet.version == self.fleet.version and fleet.at == self.fleet.at:
            return
        self.fleet = fleet
        self.wanted = {program_name(u): u for u in fleet.servers}
        self.urls.update(self.wanted)

    def turn(self) -> None:
        """One reconciliation of the programs with :attr:`wanted` (docs/runs.md); a
        supervisord that does not answer is warned about and tried again next turn."""
        try:
            self._reconcile()
        except (OSError, xmlrpc.client.Fault, KafkagenError) as exc:
            if not self._stop.is_set():
                self._warn(f"fleet: supervisord did not apply the change ({exc!r}); retrying")

    def _reconcile(self) -> None:
        sup = self.supervisor
        states = sup.states()
        programs = set(sup.programs())
        version = f"fleet v{self.fleet.version} ({self.fleet.by})" if self.fleet else "fleet"
        for name, url in self.wanted.items():
            if name not in programs:
                sup.add(self.make_program(url))
                self.echo(f"{version}: + {url}: consumer started (program {name})")
            elif name in self.stopping and states.get(name) in _DOWN:
                sup.start_program(name)
                self.stopping.discard(name)
                self.echo(f"{version}: + {url}: consumer started again (program {name})")
        for name in sorted(programs):
            if not name.startswith(CONSUMER_PREFIX) or name in self.wanted:
                continue
            url = self.urls.get(name, name)
            state = states.get(name, "UNKNOWN")
            if state in _DOWN and (name in self.stopping or state != "EXITED"):
                sup.remove(name)
                self.stopping.discard(name)
                self.echo(f"{version}: - {url}: consumer stopped and removed (program {name})")
            elif name not in self.stopping:
                sup.stop_program(name)
                self.stopping.add(name)
                self.echo(
                    f"{version}: - {url}: stopping its consumer (SIGTERM: it finishes its requests in "
                    "flight, commits and leaves the group; its partitions move to the others)"
                )

    def _warn(self, line: str) -> None:
        if line != self._warned:
            self._warned = line
            with contextlib.suppress(Exception):
                self.echo(line)
