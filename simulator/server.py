"""SGLang's HTTP API, served by aiohttp on loopback, on top of the simulated engine: the
server's life cycle (start, stop, crash, restart), its state and its public API.

Endpoints (SGLang's shapes, per ``profile.sglang_version``, see :mod:`.shapes`), one module per
family under :mod:`simulator.routes`: ``GET /health`` and ``/health_generate``, ``/server_info``
(and ``/get_server_info``), ``/model_info`` (and ``/get_model_info``), ``/v1/models``,
``/metrics`` (:mod:`.routes.info`); ``POST /v1/chat/completions`` (non-streaming),
``POST /abort_request`` (:mod:`.routes.chat`); simulator control, not in SGLang:
``GET|POST|DELETE /simulator/faults`` and ``GET /simulator/stats`` (:mod:`.routes.control`).

Mirrored from SGLang (0.5.20 and 0.5.23 agree on all of it), never kinder: before it listens
(``profile.load_s``) connections are refused; during warm-up (``profile.startup_s``) only the
health endpoints answer 503, chat is served.

With ``profile.persona`` "vllm" or "openai" it passes for vLLM 0.11.0 or a generic
OpenAI-compatible server instead (:mod:`simulator.routes.personas`).

Every response carries an ``X-Simulator`` header (profile name, persona and version), so
benchmarks can tell a simulator from a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import random
import time
from typing import Any

from aiohttp import web

from simulator.engine import Engine, SimulatorStats
from simulator.fault_control import ALL_FAULT_FIELDS, FaultControl
from simulator.inflight import InflightRequests
from simulator.prefix_cache import PrefixCache
from simulator.profile import DEFAULT_PROFILE, VLLM_VERSION, FaultConfig, SimulatorProfile
from simulator.routes import add_routes
from simulator.telemetry import Telemetry
from streams.errors import ConfigError, StackError

__all__ = ["SimulatedServer", "check_loopback"]

SHUTDOWN_TIMEOUT_S = 0.05
"""Wall seconds aiohttp waits for a handler before cancelling it on stop or crash."""

MAX_BODY_BYTES = 256 * 1024 * 1024
"""Largest request body the server reads, bytes."""


def check_loopback(host: str) -> None:
    """Refuse any address but loopback (``127.0.0.0/8``, ``::1``, ``localhost``).

    Raises:
        ConfigError: ``host`` is not a loopback address.
    """
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"the simulator listens on loopback only (127.0.0.1, ::1 or localhost), got {host!r}"
        )


class SimulatedServer:
    """An SGLang-API simulator on ``host:port`` (synthetic output; see the package docstring).

    Use as ``async with SimulatedServer(profile, port=0) as server: ... server.url``.
    ``port=0`` picks a free port; a restart keeps the port.

    Args:
        profile: the simulated server (defaults: Qwen3-family model on one B200).
        faults: faults active from the start (default: none).
        time_scale: simulated seconds per wall-clock second (100: everything 100× faster).
        host: a loopback address; anything else raises :class:`ConfigError`.
        port: TCP port; 0 picks a free one.

    Raises:
        ConfigError: ``host`` is not loopback or ``time_scale`` is not a finite number > 0.
    """

    def __init__(
        self,
        profile: SimulatorProfile = DEFAULT_PROFILE,
        *,
        faults: FaultConfig | None = None,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        check_loopback(host)
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale}")
        self.profile = profile
        self.time_scale = time_scale
        self.host = host
        self._port = port
        self.fault_control = FaultControl(faults if faults is not None else FaultConfig(), self.spawn_crash)
        """The faults and their armed state (the routes read and count them)."""
        self.inflight = InflightRequests()
        """The chat requests being answered, by rid."""
        self.telemetry = Telemetry()
        """Gauges and counters of this run (reset at every start)."""
        self.prefix_cache = PrefixCache()
        """Message prefixes seen this run (cleared at every start)."""
        self.rng = random.Random(profile.seed)
        """The random source of fault draws (abort and parse-error rates)."""
        self.started_wall = time.time()
        """Epoch seconds of the last start."""
        self._engine: Engine | None = None
        self._runner: web.AppRunner | None = None
        self._crash_task: asyncio.Task[None] | None = None
        self._crashed = False
        self._crashed_event = asyncio.Event()

    # -- public API ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port (the chosen one after start when created with ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:30000``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the server is listening."""
        return self._runner is not None

    @property
    def crashed(self) -> bool:
        """Whether a ``crash`` fault took the server down (until :meth:`restart`)."""
        return self._crashed

    @property
    def faults(self) -> FaultConfig:
        """The faults as last set."""
        return self.fault_control.config

    @property
    def engine(self) -> Engine:
        """The engine of the current run.

        Raises:
            RuntimeError: the server has not been started.
        """
        if self._engine is None:
            raise RuntimeError("the simulator has not been started")
        return self._engine

    async def start(self) -> None:
        """Listen and start the engine (a fresh engine: counters, warm-up and startup restart).

        Raises:
            StackError: the port cannot be bound.
        """
        if self._runner is not None:
            raise RuntimeError("the simulator is already running")
        if self.profile.load_s > 0:  # loading the model: nothing listens yet
            await asyncio.sleep(self.profile.load_s / self.time_scale)
        self.telemetry.reset()
        self.prefix_cache.clear()
        self._engine = Engine(self.profile, time_scale=self.time_scale)
        self._engine.start()
        self._crashed = False
        self._crashed_event.clear()
        self.started_wall = time.time()
        runner = web.AppRunner(
            self._make_app(), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self._port).start()
        except OSError as exc:
            await runner.cleanup()
            await self._engine.close()
            raise StackError(f"simulator: cannot listen on {self.host}:{self._port}: {exc}") from exc
        self._port = int(runner.addresses[0][1])
        self._runner = runner
        self.fault_control.arm(self._engine, ALL_FAULT_FIELDS)

    async def stop(self) -> None:
        """Stop gracefully: in-flight requests answer 503, then the socket closes."""
        self.fault_control.disarm_crash_timer()
        crash_task = self._crash_task
        if crash_task is not None and crash_task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await crash_task
        if self._engine is not None:
            await self._engine.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def crash(self) -> None:
        """Crash now: close the listening socket and drop every connection without an answer.

        In-flight requests are lost (clients see the connection close); new connections
        are refused. :meth:`restart` brings the server back on the same port.
        """
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._crashed = True
        self.fault_control.crash_spent()
        await runner.cleanup()  # cancels the handlers, which abort their jobs
        if self._engine is not None:
            await self._engine.close()
        self._crashed_event.set()

    def spawn_crash(self) -> None:
        """Crash soon, in a task of its own (a handler or a timer asks; the crash cancels handlers)."""
        if self._crash_task is None or self._crash_task.done():
            self._crash_task = asyncio.get_running_loop().create_task(self.crash(), name="simulator-crash")

    async def wait_crashed(self) -> None:
        """Return once the server has crashed (the CLI exits then)."""
        await self._crashed_event.wait()

    async def restart(self) -> None:
        """Stop (if running) and start again on the same port, like a restarted server."""
        await self.stop()
        await self.start()

    def set_faults(self, faults: FaultConfig | None = None, /, **changes: Any) -> FaultConfig:
        """Replace all faults (``faults``) or change some fields (``**changes``).

        The changed fields are re-armed now: a new 503 count or window, a new crash timer.
        Returns the new configuration.

        Raises:
            ConfigError: an unknown field or a bad value.
        """
        if faults is not None and changes:
            raise ConfigError("pass either a FaultConfig or field changes, not both")
        if faults is not None:
            new, changed = faults, set(ALL_FAULT_FIELDS)
        else:
            new, changed = FaultConfig.from_mapping(changes, base=self.fault_control.config), set(changes)
        self.fault_control.config = new
        if self._runner is not None:
            self.fault_control.arm(self.engine, changed)
        return new

    def clear_faults(self) -> FaultConfig:
        """Remove every fault."""
        return self.set_faults(FaultConfig())

    def fault_state(self) -> dict[str, Any]:
        """The faults and what is left of them now (the body of ``GET /simulator/faults``).

        Raises:
            RuntimeError: the server has not been started.
        """
        return self.fault_control.state(self.engine.now(), crashed=self._crashed)

    def stats(self) -> SimulatorStats:
        """Counters now (for benchmarks: occupancy, throughput, aborts).

        Raises:
            RuntimeError: the server has not been started.
        """
        engine = self.engine
        engine.sync()
        return SimulatorStats(
            elapsed_s=engine.elapsed_s,
            running=engine.running,
            queued=engine.queued,
            max_running_requests=self.profile.max_running_requests,
            requests_received=engine.received,
            requests_started=engine.started,
            requests_finished=engine.completed,
            requests_aborted=engine.aborted,
            requests_rejected=self.telemetry.rejected,
            prompt_tokens_total=engine.prompt_tokens_total,
            generation_tokens_total=math.floor(engine.generated_tokens + 1e-6),
            gen_throughput=engine.gen_throughput(),
            running_request_seconds=engine.running_request_seconds,
            queued_request_seconds=engine.queued_request_seconds,
        )

    async def __aenter__(self) -> SimulatedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- the application -----------------------------------------------------------------

    @web.middleware
    async def _mark(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        p = self.profile
        version = {"sglang": p.sglang_version, "vllm": VLLM_VERSION}.get(p.persona, "")
        response.headers["X-Simulator"] = f"{p.name}; {p.persona} {version}".rstrip()
        return response

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._mark])
        add_routes(app, self)
        return app
