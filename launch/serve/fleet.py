"""A fleet of inference servers, one per GPU, running detached under supervisord.

``<home>/serve/<fleet name>/`` holds supervisord's files, one log per GPU and the fleet record
``fleet.json``, which ``serve status``, ``down``, ``logs`` and the main job read. A server that
exits within :data:`START_SECS` seconds of a start failed to start; after :data:`START_RETRIES`
such failures in a row it ends ``FATAL``. docs/serve.md, "Detached".
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from launch.serve.model_copy import copy_model
from launch.serve.sglang_args import server_argv
from launch.serve.spec import FleetSpec
from launch.stack.process import port_owner, wait_until
from launch.supervise import Program, Supervisor
from streams.errors import ConfigError, ServiceNotReadyError, StackError

__all__ = ["START_RETRIES", "START_SECS", "Fleet", "ServerState", "fleet_home"]

START_SECS = 10
START_RETRIES = 3
STOP_WAIT_S = 30  # docker-compose.yml x-sglang stop_grace_period
_FAILED = {"FATAL", "EXITED", "BACKOFF", "STOPPED"}
Echo = Callable[[str], None]


def fleet_home(stack_home: str | Path, name: str) -> Path:
    """``<stack home>/serve/<name>``, resolved."""
    return (Path(stack_home) / "serve" / name).resolve()


@dataclass(frozen=True)
class ServerState:
    """One server of a fleet as ``serve status`` shows it.

    Attributes:
        gpu: the GPU index; program: ``gpu-<i>``; url: its base URL; log: its log file.
        pid: its pid (0: not running); state: supervisord's state name (``RUNNING``,
            ``STARTING``, ``BACKOFF``, ``FATAL``, ``EXITED``, ``STOPPED``; ``DOWN`` without
            supervisord).
        health: the health answer: an HTTP status such as ``200``, or why there is none.
    """

    gpu: int
    program: str
    url: str
    log: Path
    pid: int
    state: str
    health: str

    @property
    def ready(self) -> bool:
        """Running (or still within its start seconds) and the health path answered 200."""
        return self.state in ("RUNNING", "STARTING") and self.health == "200"


def _health(url: str, timeout_s: float) -> str:
    """The status of ``GET url`` as text (``"200"``), or the reason there is none."""
    try:
        return str(httpx.get(url, timeout=timeout_s).status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


class Fleet:
    """The fleet named ``name`` under ``stack_home`` (:func:`fleet_home`)."""

    def __init__(self, stack_home: str | Path, name: str = "fleet") -> None:
        self.name = name
        self.home = fleet_home(stack_home, name)
        self.record_path = self.home / "fleet.json"
        self.supervisor = Supervisor(self.home)

    # -- the record -----------------------------------------------------------------------------
    def record(self) -> dict[str, Any] | None:
        """The fleet record (``fleet.json``), or None when there is none."""
        try:
            data = json.loads(self.record_path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ConfigError(
                f"{self.record_path} is not valid JSON ({exc}); run `kafkagen serve down`"
            ) from None
        assert isinstance(data, dict)
        return data

    def _readable_record(self, echo: Echo | None = None) -> dict[str, Any] | None:
        """The record when it can be read, else None: an unreadable one is moved aside to
        ``fleet.json.corrupt`` (when ``echo`` is given, saying so), so ``down`` still stops the
        fleet and ``up`` starts afresh."""
        try:
            record = self.record()
        except ConfigError as exc:
            if echo is None:
                return None
            self.record_path.replace(self.record_path.with_name("fleet.json.corrupt"))
            echo(f"warning: {exc}; moved it to fleet.json.corrupt")
            return None
        ok = record is not None and all(
            isinstance(s, dict) and {"program", "port"} <= s.keys() for s in record.get("servers", [None])
        )
        return record if ok else None

    def spec(self) -> FleetSpec | None:
        """The spec of the recorded fleet (as given to ``up``), or None."""
        record = self.record()
        return FleetSpec.from_json(record["spec"]) if record else None

    def urls(self) -> list[str]:
        """The recorded servers' URLs in GPU order (empty without a record), e.g. for consumers started
        by hand (``serve up`` prints them as ``KAFKAGEN_SERVERS``)."""
        record = self.record()
        return [s["url"] for s in record["servers"]] if record else []

    def _write_record(self, spec: FleetSpec, model_path: str) -> None:
        servers = [
            {
                "gpu": gpu,
                "program": spec.program_of(k),
                "url": spec.url_of(k),
                "port": spec.port_of(k),
                "log": str(self.supervisor.log_path(spec.program_of(k))),
            }
            for k, gpu in enumerate(spec.gpus)
        ]
        record = {"name": self.name, "spec": spec.to_json(), "model_path": model_path, "servers": servers}
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(self.record_path)

    # -- up ------------------------------------------------------------------------------------
    def up(
        self,
        spec: FleetSpec,
        *,
        echo: Echo = print,
        after_ready: Callable[[list[str]], None] | None = None,
        free_bytes: Callable[[Path], int] | None = None,
    ) -> list[str]:
        """Start the fleet (idempotent), wait until every server is ready, then ``after_ready``.

        Under the lock ``up.lock`` (a second ``up`` waits, then finds the fleet running): the same
        spec running is reported (only programs that ended are started again), another is an
        error; the model copy; the port check; the record and supervisord, one program per GPU.
        Then :meth:`wait_ready` and ``after_ready(urls)`` (the preflight; skipped when None).

        Returns:
            The server URLs in GPU order.

        Raises:
            ConfigError: another spec is running (``serve down`` first), a bad template, or the
                model copy does not fit.
            StackError: a port is taken or supervisord does not start.
            ServiceNotReadyError: a server failed or was not ready in ``spec.ready_timeout_s``.
        """
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "up.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                echo(f"another `serve up` of fleet {self.name!r} is under way: waiting for it")
                fcntl.flock(lock, fcntl.LOCK_EX)
            self._up_locked(spec, echo=echo, free_bytes=free_bytes)
        urls = spec.urls
        self.wait_ready(spec, echo=echo)
        if after_ready is not None:
            after_ready(urls)  # the preflight (issue 13): a sample of prompts per server
        return urls

    def _up_locked(self, spec: FleetSpec, *, echo: Echo, free_bytes: Callable[[Path], int] | None) -> None:
        running = self.supervisor.running()
        current = self.spec() if running else None
        if running and current is None:
            raise StackError(
                f"a supervisord runs in {self.home} without a fleet record; stop it: `kafkagen serve down"
                f" --fleet {self.name}`"
            )
        if current is not None and current.runtime_key() != spec.runtime_key():
            changed = sorted(k for k, v in spec.runtime_key().items() if current.runtime_key().get(k) != v)
            raise ConfigError(
                f"fleet {self.name!r} is running with another spec (different: {', '.join(changed)}); "
                f"stop it first with `kafkagen serve down --fleet {self.name}`, or start this one under "
                "another --fleet and --port"
            )
        if current is not None:
            echo(f"fleet {self.name!r} is already running ({len(spec.gpus)} servers): not restarting")
            for name, info in self.supervisor.info().items():
                if info["statename"] in ("FATAL", "EXITED", "STOPPED"):
                    echo(f"{name}: was {info['statename']}, starting it again")
                    self.supervisor.start_program(name)
        else:
            self._start(spec, echo=echo, free_bytes=free_bytes)

    def _start(self, spec: FleetSpec, *, echo: Echo, free_bytes: Callable[[Path], int] | None) -> None:
        server_argv(spec, 0)  # a bad template fails before any copy
        served = spec
        if spec.copy_model_to:
            copied = copy_model(Path(spec.model_path), Path(spec.copy_model_to), free_bytes=free_bytes)
            served = dataclasses.replace(
                spec, model_path=str(copied), served_model_name=spec.served_model_name or spec.model_path
            )
        programs = [
            Program(
                name=spec.program_of(k),
                argv=tuple(server_argv(served, k)),
                stop_wait_s=STOP_WAIT_S,
                env=(("CUDA_VISIBLE_DEVICES", str(gpu)),),
                start_secs=START_SECS,
                start_retries=START_RETRIES,
            )
            for k, gpu in enumerate(spec.gpus)
        ]
        left = {proc.pid for proc in self.supervisor.orphans()}
        for k, gpu in enumerate(spec.gpus):
            owner = port_owner(spec.port_of(k))
            if owner is not None and left and any(f"pid {pid} " in owner + " " for pid in left):
                raise StackError(
                    f"port {spec.port_of(k)} (gpu-{gpu}) is taken by {owner}, a server of fleet "
                    f"{self.name!r} left running without its supervisord (killed?): stop it with "
                    f"`kafkagen serve down --fleet {self.name}`, then `up` again"
                )
            if owner is not None:
                raise StackError(
                    f"port {spec.port_of(k)} (gpu-{gpu}) is taken by {owner}: stop it, or start the fleet "
                    "on other ports (--port)"
                )
        self._write_record(spec, served.model_path)
        for p in programs:
            log = self.supervisor.log_path(p.name)
            if log.exists():
                log.unlink()  # one start, one log: the error lines are this start's
        echo(f"starting {len(programs)} servers under supervisord in {self.home}")
        self.supervisor.start(programs, cwd=Path.cwd())

    # -- ready ---------------------------------------------------------------------------------
    def wait_ready(self, spec: FleetSpec, *, echo: Echo = print, timeout_s: float | None = None) -> None:
        """Wait until ``GET <url><health path>`` answers 200 for every server, polling each
        concurrently about once a second, for ``timeout_s`` (default ``spec.ready_timeout_s``).

        Raises:
            ServiceNotReadyError: a program ended ``FATAL``, ``EXITED``, ``STOPPED`` or is in
                ``BACKOFF`` (a start failed): at once, naming its GPU, URL, log and last log lines;
                or the timeout passed: naming each GPU not ready and its last log line.
        """
        timeout_s = spec.ready_timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic()
        pending = spec.servers
        checks: dict[str, Future[str]] = {}
        with ThreadPoolExecutor(max_workers=min(16, len(pending))) as pool:
            while pending:
                try:
                    info = self.supervisor.info()
                except OSError:  # its socket is gone: `serve down` from another shell
                    raise ServiceNotReadyError(
                        f"fleet {self.name!r}: supervisord stopped while waiting for the servers "
                        "(`kafkagen serve down`?); `kafkagen serve up` starts it again"
                    ) from None
                for name, url in list(pending.items()):
                    state = info.get(name, {}).get("statename", "UNKNOWN")
                    if state == "STOPPED":  # only a stop request stops a program (autorestart=true)
                        raise ServiceNotReadyError(
                            f"{name} ({url}) was stopped while waiting for it to be ready (`kafkagen "
                            "serve down`?); `kafkagen serve up` starts it again"
                        )
                    if state in _FAILED:
                        raise ServiceNotReadyError(self._failed(name, url, state))
                    future = checks.get(name)
                    if future is not None and future.done():
                        del checks[name]
                        if future.result() == "200":
                            echo(f"{name} ready after {time.monotonic() - t0:.0f} s ({url})")
                            del pending[name]
                            continue
                    if name not in checks:
                        checks[name] = pool.submit(_health, url + spec.health_path, 30.0)
                if not pending:
                    break
                if time.monotonic() - t0 > timeout_s:
                    lines = [
                        f"{n} ({pending[n]}): {self._last_line(n) or 'no log line'}" for n in sorted(pending)
                    ]
                    raise ServiceNotReadyError(
                        f"not ready after {timeout_s:.0f} s ({spec.health_path} did not answer 200): "
                        + "; ".join(lines)
                        + f"; logs in {self.supervisor.log_dir}; a longer --ready-timeout if they are "
                        "still loading, else `kafkagen serve down`"
                    )
                time.sleep(1.0)

    def _last_line(self, program: str) -> str:
        lines = [line for line in self.tail(program, 20).splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def _failed(self, program: str, url: str, state: str) -> str:
        tail = [line for line in self.tail(program, 10).splitlines() if line.strip()]
        last = "\n    ".join(tail[-5:]) if tail else "(the log is empty)"
        return (
            f"{program} ({url}) failed to start: supervisord reports {state}; its log "
            f"{self.supervisor.log_path(program)} ends:\n    {last}\n"
            "fix the cause, then `kafkagen serve down` and `up` again"
        )

    # -- status, logs, down ----------------------------------------------------------------------
    def status(self, timeout_s: float = 5.0) -> list[ServerState]:
        """Each recorded server: pid, supervisord state and the health answer (concurrently).

        Raises:
            ConfigError: there is no fleet record (``serve up`` first).
        """
        record = self.record()
        if record is None:
            raise ConfigError(f"no fleet {self.name!r} in {self.home}: start one with `kafkagen serve up`")
        spec = FleetSpec.from_json(record["spec"])
        info: dict[str, dict[str, Any]] = {}
        if self.supervisor.running():
            with contextlib.suppress(OSError):
                info = self.supervisor.info()
        servers = record["servers"]
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(servers)))) as pool:
            answers = list(pool.map(lambda s: _health(s["url"] + spec.health_path, timeout_s), servers))
        return [
            ServerState(
                gpu=s["gpu"],
                program=s["program"],
                url=s["url"],
                log=Path(s["log"]),
                pid=int(info.get(s["program"], {}).get("pid", 0)),
                state=info.get(s["program"], {}).get("statename", "DOWN"),
                health=answer,
            )
            for s, answer in zip(servers, answers, strict=True)
        ]

    def programs(self) -> list[str]:
        """The recorded programs (``gpu-<i>``) in GPU order."""
        record = self.record()
        return [s["program"] for s in record["servers"]] if record else []

    def tail(self, program: str, lines: int = 30) -> str:
        """The last ``lines`` lines of ``program``'s log ("" when there is none)."""
        try:
            with self.supervisor.log_path(program).open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 256 * 1024))
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def down(self, *, echo: Echo = print, timeout_s: float = 120.0) -> None:
        """Stop every server gracefully (SIGTERM, SIGKILL after :data:`STOP_WAIT_S` s) and
        supervisord, and wait until their ports are free. The record stays (``status`` reads it).

        Raises:
            StackError: supervisord or a port did not let go within ``timeout_s`` seconds.
        """
        record = self._readable_record(echo)
        if not self.supervisor.running():
            left = self.supervisor.orphans()
            echo(f"fleet {self.name!r}: not running" + (" (its supervisord is gone)" if left else ""))
            if left:
                echo(f"stopping what it left running: pid {', '.join(str(p.pid) for p in left)}")
                self.supervisor.shutdown(timeout_s=timeout_s, stop_wait_s=STOP_WAIT_S)
        else:
            echo(f"fleet {self.name!r}: stopping {len(record['servers']) if record else 0} servers")
            self.supervisor.shutdown(timeout_s=timeout_s)
        ports = [int(s["port"]) for s in record["servers"]] if record else []
        if not wait_until(
            lambda: all(port_owner(p) is None for p in ports), timeout_s=timeout_s, interval_s=0.5
        ):
            taken = ", ".join(f"{p} ({port_owner(p)})" for p in ports if port_owner(p))
            raise StackError(f"fleet {self.name!r} stopped but ports are still taken: {taken}")
        echo(f"fleet {self.name!r}: stopped")
