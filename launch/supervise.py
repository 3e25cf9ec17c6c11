"""Supervision of the job's long-running processes (generation consumers, the sink) by supervisord.

Each component is its own supervisord program (own process group, own log file, restarted when it
dies, stopped with SIGTERM and a grace period for a consumer's drain); supervisord daemonizes, so
the job outlives the terminal or SSH session that started it. Control goes through supervisord's
XML-RPC interface on a Unix socket (supervisor docs, "XML-RPC API Documentation"). docs/main-job.md,
"Supervision".
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil
from supervisor.xmlrpc import Faults, SupervisorTransport

from launch.stack.process import wait_until
from streams.errors import ConfigError, StackError

__all__ = ["Program", "Supervisor", "command_line", "environment_line"]

# supervisord's XML-RPC fault codes (supervisor/xmlrpc.py ``Faults``).
_BAD_NAME = Faults.BAD_NAME
_NOT_RUNNING = Faults.NOT_RUNNING
_STILL_RUNNING = Faults.STILL_RUNNING
_ALREADY_STARTED = Faults.ALREADY_STARTED


@dataclass(frozen=True)
class Program:
    """One supervised program.

    Attributes:
        name: program name (letters, digits, ``-``, ``_``), also its log file's name.
        argv: the command line.
        stop_wait_s: seconds between SIGTERM and SIGKILL on stop.
        env: environment of this program on top of supervisord's (e.g.
            ``(("CUDA_VISIBLE_DEVICES", "3"),)``), written to the config as ``environment=``
            (:func:`environment_line`): no secrets here.
        start_secs: seconds a start must stay up to count as started (supervisord ``startsecs``).
        start_retries: failed starts in a row before the program ends ``FATAL``
            (``startretries``); a program that dies after it started is always restarted
            (``autorestart=true``) and its count starts anew.
    """

    name: str
    argv: tuple[str, ...]
    stop_wait_s: int = 75
    env: tuple[tuple[str, str], ...] = ()
    start_secs: int = 2
    start_retries: int = 1000


def command_line(argv: Sequence[str]) -> str:
    """supervisord's ``command=`` value for ``argv``: read back by supervisord as ``argv`` exactly.

    Each word is ``shlex.quote``-d, a ``;`` or ``#`` after whitespace gets an empty ``''`` before it
    and ``%`` is doubled: supervisor 4.3.0 ``supervisor/process.py`` ``get_execv_args`` and
    ``supervisor/options.py`` ``UnhosedConfigParser`` (why: docs/main-job.md, "Supervision").

    Raises:
        ConfigError: a word holds a newline (a config value is one line).
    """
    for word in argv:
        if "\n" in word or "\r" in word:
            raise ConfigError(f"the command argument {word!r} holds a newline: supervisord cannot run it")
    quoted = (re.sub(r"(\s)([;#])", r"\1''\2", shlex.quote(word)) for word in argv)
    return " ".join(quoted).replace("%", "%%")


def environment_line(env: Sequence[tuple[str, str]]) -> str:
    """supervisord's ``environment=`` value for ``env``: ``KEY="value",...``.

    Quoted with ``"`` (``'`` when the value holds a ``"``), no escapes, ``%`` doubled: supervisor
    4.3.0 ``supervisor/datatypes.py`` ``dict_of_key_value_pairs`` (docs/main-job.md, "Supervision").

    Raises:
        ConfigError: a name that is not an identifier, or a value holding both quote characters,
            a newline, a ``;`` or ``#`` after whitespace, or starting or ending with a quote (it
            cannot be written).
    """
    parts = []
    for key, value in env:
        if not key.isidentifier():
            raise ConfigError(f"environment variable name {key!r} is not valid")
        quote = '"' if '"' not in value else "'"
        ends = value[:1] + value[-1:]
        comment = re.search(r"\s[;#]", value)  # the config parser would cut it there (command_line)
        if quote in value or "\n" in value or any(c in "\"'" for c in ends) or comment:
            raise ConfigError(f"environment variable {key}={value!r} cannot be written for supervisord")
        parts.append(f"{key}={quote}{value.replace('%', '%%')}{quote}")
    return ",".join(parts)


class Supervisor:
    """A supervisord instance for one job, with its files under ``home``.

    Args:
        home: folder for the config, socket, pid file and logs (created).
        env: environment for every program on top of the caller's (e.g.
            ``streams.environment.settings_to_env(settings)``); passed to supervisord's process, never
            written to its config file.
    """

    def __init__(self, home: Path, env: Mapping[str, str] | None = None) -> None:
        self.home = home.resolve()
        self.env = dict(env or {})
        self.conf = self.home / "supervisord.conf"
        self.socket = self.home / "supervisord.sock"
        self.log_dir = self.home / "logs"
        self._programs: dict[str, Program] = {}
        """the programs in the config file, by name (:meth:`start`, :meth:`add`, :meth:`remove`)."""
        self._cwd = Path.cwd()

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
                f"command={command_line(p.argv)}",
                f"directory={cwd}",
                "autostart=false",
                "autorestart=true",
                f"startsecs={p.start_secs}",
                f"startretries={p.start_retries}",
                "stopsignal=TERM",
                f"stopwaitsecs={p.stop_wait_s}",
                "stopasgroup=true",
                "killasgroup=true",
                *([f"environment={environment_line(p.env)}"] if p.env else []),
                "redirect_stderr=true",
                f"stdout_logfile={self.log_path(p.name)}",
                "stdout_logfile_maxbytes=50MB",
                "stdout_logfile_backups=3",
            ]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, programs: Sequence[Program], cwd: Path, timeout_s: float = 30.0) -> None:
        """Start supervisord (if not running) with ``programs`` and start every program.

        Raises:
            StackError: supervisord did not come up within ``timeout_s`` seconds.
            ConfigError: supervisord refuses a program's command (no such file, not executable);
                supervisord is stopped again.
        """
        # A supervisord of the same home (e.g. of a job whose terminal went away) is stopped first,
        # its programs gracefully, and waited for until its process is gone: while it stops it no
        # longer answers as RUNNING but still holds the socket, and a new one could not bind it.
        self.shutdown()
        self.home.mkdir(parents=True, exist_ok=True)
        self._programs = {p.name: p for p in programs}
        self._cwd = cwd
        self.write_config(programs, cwd)
        supervisord = Path(sys.executable).with_name("supervisord")
        # Programs inherit supervisord's environment: settings travel there, not in the config
        # file (which would need supervisord's own quoting, and would hold secrets on disk).
        env = {**os.environ, **self.env}
        subprocess.run([str(supervisord), "-c", str(self.conf)], check=True, cwd=cwd, env=env)
        self._wait(self.running, timeout_s, "supervisord to start")
        for p in programs:
            try:
                self._proxy().supervisor.startProcess(p.name, False)
            except xmlrpc.client.Fault as fault:  # NO_FILE, NOT_EXECUTABLE: the command is wrong
                self.shutdown(timeout_s=timeout_s)
                raise ConfigError(
                    f"supervisord cannot start {p.name} ({fault.faultString}); its command: "
                    f"{shlex.join(p.argv)}; fix it (nothing was left running)"
                ) from None

    def start_program(self, name: str) -> None:
        """Start program ``name`` again (e.g. one that ended ``FATAL``); does not wait."""
        self._proxy().supervisor.startProcess(name, False)

    def programs(self) -> list[str]:
        """The names of the programs in the config (started by :meth:`start` or :meth:`add`)."""
        return list(self._programs)

    def add(self, program: Program) -> None:
        """Add ``program`` to the running supervisord and start it (does not wait): the config is
        rewritten with it, supervisord re-reads it (``reloadConfig``) and adds its group
        (``addProcessGroup``; supervisor docs, "XML-RPC API Documentation").

        Raises:
            ConfigError: a program of that name is in the config already, or supervisord refuses
                the command (it is then taken out again).
            OSError, xmlrpc.client.Fault: supervisord does not answer.
        """
        if program.name in self._programs:
            raise ConfigError(f"supervisord program {program.name} exists already")
        self._programs[program.name] = program
        self.write_config(list(self._programs.values()), self._cwd)
        proxy = self._proxy()
        proxy.supervisor.reloadConfig()
        try:
            proxy.supervisor.addProcessGroup(program.name)
            proxy.supervisor.startProcess(program.name, False)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode == _ALREADY_STARTED:
                return
            with contextlib.suppress(OSError, xmlrpc.client.Fault, ConfigError):
                self.remove(program.name)
            raise ConfigError(f"supervisord cannot start {program.name} ({fault.faultString})") from None

    def stop_program(self, name: str) -> None:
        """Ask supervisord to stop program ``name`` (SIGTERM, SIGKILL after its ``stop_wait_s``);
        does not wait. A program that is not running is left as it is."""
        try:
            self._proxy().supervisor.stopProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode not in (_NOT_RUNNING, _BAD_NAME):
                raise

    def remove(self, name: str) -> None:
        """Take the stopped program ``name`` out of supervisord (``removeProcessGroup``) and of
        the config. A name supervisord does not know is only taken out of the config.

        Raises:
            StackError: the program still runs (stop it first: :meth:`stop_program`).
            OSError, xmlrpc.client.Fault: supervisord does not answer.
        """
        try:
            self._proxy().supervisor.removeProcessGroup(name)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode == _STILL_RUNNING:
                raise StackError(f"supervisord program {name} still runs: stop it first") from None
            if fault.faultCode != _BAD_NAME:
                raise
        self._programs.pop(name, None)
        self.write_config(list(self._programs.values()), self._cwd)
        self._proxy().supervisor.reloadConfig()

    def log_path(self, name: str) -> Path:
        """The log file of program ``name`` (its stdout and stderr)."""
        return self.log_dir / (name + ".log")

    def info(self) -> dict[str, dict[str, Any]]:
        """Program name → supervisord's process info (``statename``, ``pid``, ``spawnerr``,
        ``exitstatus``...; supervisor docs, ``getAllProcessInfo``)."""
        return {i["name"]: i for i in self._proxy().supervisor.getAllProcessInfo()}

    def pid(self, name: str) -> int:
        """The pid of program ``name`` (0 when it is not running)."""
        return cast(int, self._proxy().supervisor.getProcessInfo(name)["pid"])

    def states(self) -> dict[str, str]:
        """Program name → supervisord state name (``RUNNING``, ``STARTING``, ``BACKOFF``, ``EXITED``...)."""
        return {i["name"]: i["statename"] for i in self._proxy().supervisor.getAllProcessInfo()}

    def process(self) -> psutil.Process | None:
        """supervisord's process from its pid file, or None when it no longer runs."""
        try:
            proc = psutil.Process(int((self.home / "supervisord.pid").read_text().strip()))
            if proc.status() != psutil.STATUS_ZOMBIE and "supervisord" in " ".join(proc.cmdline()):
                return proc
        except (OSError, ValueError, psutil.Error):
            pass
        return None

    def orphans(self) -> list[psutil.Process]:
        """The processes this supervisord started that outlived it (a SIGKILLed supervisord does
        not take its programs along; they keep running, reparented to init), their children
        included: every process whose environment has ``SUPERVISOR_SERVER_URL`` equal to this
        supervisord's socket URL, which supervisord sets for each program it spawns
        (``supervisor/process.py`` ``_spawn``, supervisor 4.3.0; from ``[supervisorctl]
        serverurl``). Empty while supervisord runs."""
        if self.running() or self.process() is not None:
            return []
        url = f"unix://{self.socket}"
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get("SUPERVISOR_SERVER_URL") == url:
                    found.append(proc)
        return found

    def shutdown(self, timeout_s: float = 120.0, stop_wait_s: float = 75.0) -> None:
        """Stop every program gracefully (SIGTERM, then SIGKILL after its stop wait) and supervisord,
        and wait until supervisord's process has exited: while it stops it no longer answers as
        RUNNING but still holds its socket.

        Without supervisord (it was SIGKILLed), the programs it left running (:meth:`orphans`) are
        stopped the same way: SIGTERM, SIGKILL after ``stop_wait_s`` seconds.

        Raises:
            StackError: supervisord still runs after ``timeout_s`` seconds.
        """
        if self.running():
            with contextlib.suppress(OSError, xmlrpc.client.Fault):
                self._proxy().supervisor.stopAllProcesses(True)
            with contextlib.suppress(OSError, xmlrpc.client.Fault):
                self._proxy().supervisor.shutdown()
        self._wait(lambda: not self.running() and self.process() is None, timeout_s, "supervisord to stop")
        left = self.orphans()
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(left, timeout=stop_wait_s)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)

    @staticmethod
    def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not wait_until(check, timeout_s=timeout_s, interval_s=0.2):
            raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}")
