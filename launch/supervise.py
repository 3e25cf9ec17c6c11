"""Supervision of the job's long-running processes (generation consumers, the sink) by supervisord.

Each component runs as its own supervisord program: its own process (in its own process group),
its own log file, restarted automatically when it dies (``autorestart=true``), stopped with
SIGTERM and a grace period long enough for a consumer's drain. supervisord itself daemonizes, so
the job keeps running if the terminal or SSH session that started it goes away (the old job's
background runs died with the session). Control goes through supervisord's XML-RPC interface on a
Unix socket (supervisor docs, "XML-RPC API Documentation").
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from supervisor.xmlrpc import SupervisorTransport

from launch.stack.process import wait_until
from streams.errors import StackError

__all__ = ["Program", "Supervisor"]


@dataclass(frozen=True)
class Program:
    """One supervised program.

    Attributes:
        name: program name (letters, digits, ``-``, ``_``), also its log file's name.
        argv: the command line.
        stop_wait_s: seconds between SIGTERM and SIGKILL on stop.
    """

    name: str
    argv: tuple[str, ...]
    stop_wait_s: int = 75


class Supervisor:
    """A supervisord instance for one job, with its files under ``home``.

    Args:
        home: folder for the config, socket, pid file and logs (created).
        env: environment for every program on top of the caller's (e.g.
            ``streams.config.settings_to_env(settings)``); passed to supervisord's process, never
            written to its config file.
    """

    def __init__(self, home: Path, env: Mapping[str, str] | None = None) -> None:
        self.home = home.resolve()
        self.env = dict(env or {})
        self.conf = self.home / "supervisord.conf"
        self.socket = self.home / "supervisord.sock"
        self.log_dir = self.home / "logs"

    def _proxy(self) -> Any:
        transport = SupervisorTransport(None, None, f"unix://{self.socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def running(self) -> bool:
        """True when this job's supervisord answers on its socket."""
        try:
            return cast(str, self._proxy().supervisor.getState()["statename"]) == "RUNNING"
        except (OSError, xmlrpc.client.Fault):
            return False

    def write_config(self, programs: Sequence[Program], cwd: Path) -> None:
        """Write ``supervisord.conf`` for ``programs`` (run in ``cwd``)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            "[unix_http_server]",
            f"file={self.socket}",
            "chmod=0700",
            "[supervisord]",
            f"logfile={self.log_dir / 'supervisord.log'}",
            f"pidfile={self.home / 'supervisord.pid'}",
            f"directory={cwd}",
            "nodaemon=false",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
            "[supervisorctl]",
            f"serverurl=unix://{self.socket}",
        ]
        for p in programs:
            lines += [
                f"[program:{p.name}]",
                f"command={shlex.join(p.argv).replace('%', '%%')}",
                f"directory={cwd}",
                "autostart=false",
                "autorestart=true",
                "startsecs=2",
                "startretries=1000",
                "stopsignal=TERM",
                f"stopwaitsecs={p.stop_wait_s}",
                "stopasgroup=true",
                "killasgroup=true",
                "redirect_stderr=true",
                f"stdout_logfile={self.log_dir / (p.name + '.log')}",
                "stdout_logfile_maxbytes=50MB",
                "stdout_logfile_backups=3",
            ]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, programs: Sequence[Program], cwd: Path, timeout_s: float = 30.0) -> None:
        """Start supervisord (if not running) with ``programs`` and start every program.

        Raises:
            StackError: supervisord did not come up within ``timeout_s`` seconds.
        """
        if self.running():
            self._proxy().supervisor.shutdown()
            self._wait(lambda: not self.running(), timeout_s, "the previous supervisord to stop")
        self.home.mkdir(parents=True, exist_ok=True)
        self.write_config(programs, cwd)
        supervisord = Path(sys.executable).with_name("supervisord")
        # Programs inherit supervisord's environment: settings travel there, not in the config
        # file (which would need supervisord's own quoting, and would hold secrets on disk).
        env = {**os.environ, **self.env}
        subprocess.run([str(supervisord), "-c", str(self.conf)], check=True, cwd=cwd, env=env)
        self._wait(self.running, timeout_s, "supervisord to start")
        for p in programs:
            self._proxy().supervisor.startProcess(p.name, False)

    def pid(self, name: str) -> int:
        """The pid of program ``name`` (0 when it is not running)."""
        return cast(int, self._proxy().supervisor.getProcessInfo(name)["pid"])

    def states(self) -> dict[str, str]:
        """Program name → supervisord state name (``RUNNING``, ``STARTING``, ``BACKOFF``, ``EXITED``...)."""
        return {i["name"]: i["statename"] for i in self._proxy().supervisor.getAllProcessInfo()}

    def shutdown(self, timeout_s: float = 120.0) -> None:
        """Stop every program gracefully (SIGTERM, then SIGKILL after its stop wait) and supervisord."""
        if not self.running():
            return
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            self._proxy().supervisor.stopAllProcesses(True)
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            self._proxy().supervisor.shutdown()
        self._wait(lambda: not self.running(), timeout_s, "supervisord to stop")

    @staticmethod
    def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not wait_until(check, timeout_s=timeout_s, interval_s=0.2):
            raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}")
