"""SGLang's HTTP API, served by aiohttp on loopback, on top of the simulated engine.

Endpoints (SGLang's shapes, per ``profile.sglang_version``, see :mod:`.shapes`):
``GET /health`` and ``/health_generate``, ``/server_info`` (and ``/get_server_info``),
``/model_info`` (and ``/get_model_info``), ``/v1/models``, ``/metrics``;
``POST /v1/chat/completions`` (non-streaming), ``POST /abort_request``.

Behaviour mirrored from SGLang (0.5.20 and 0.5.23 agree on all of it; paths under
``python/sglang/srt/``), never kinder:

* ``/health`` *is* ``/health_generate`` (``entrypoints/http_server.py`` ``health_generate``
  serves both; ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` defaults to true in
  ``environ.py``): 503 while starting or shutting down, else a 1-token probe that answers 200
  as soon as any output arrives and 503 after ``health_check_timeout_s``.
* ``/server_info`` asks the scheduler (``managers/tokenizer_manager.py`` /
  ``tokenizer_control_mixin.py`` ``get_internal_state``), so it hangs while the engine hangs.
* Before it listens (``profile.load_s``) connections are refused; during warm-up
  (``profile.startup_s``) only the health endpoints answer 503, chat is served.
* No 503 for load unless ``profile.max_queued_requests`` is set (``managers/scheduler.py``
  ``_abort_on_queued_limit``: 503 "The request queue is full.", error ``type`` "503").
* 400 when the prompt has ``>=`` context tokens or prompt + ``max_tokens`` ``>`` context
  (``managers/tokenizer_manager.py`` ``_validate_one_request``).
* ``/abort_request {rid}`` does nothing unless ``rid`` is a request in flight
  (``TokenizerManager.abort_request`` returns early with one tokenizer worker); then the
  scheduler aborts every request whose rid starts with it (``Scheduler.abort_request``
  ``req.rid.startswith``); a client disconnect aborts the same way. An aborted request
  answers 200 with ``finish_reason: "abort"``; one aborted while waiting has no tokens.
* ``/metrics`` gauges refresh only when the scheduler logs stats (each prefill batch, every
  ``decode_log_interval`` decode steps); counters grow when a request finishes.

Simulator control (not in SGLang): ``GET|POST|DELETE /simulator/faults`` and
``GET /simulator/stats``.

Every response carries an ``X-Simulator`` header (profile name and SGLang version) and every
chat response two more that SGLang does not send: ``X-Simulator-Queue-Seconds`` and
``X-Simulator-E2E-Seconds`` (simulated seconds spent waiting for a slot and in total), so
benchmarks can check latency without wall-clock noise.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from aiohttp import web

from simulator import shapes
from simulator.engine import Engine, Job, SimulatorStats
from simulator.output import OutputPlan, estimate_prompt_tokens, plan_output, request_seed
from simulator.profile import DEFAULT_PROFILE, FaultConfig, SimulatorProfile
from simulator.shapes import Counters, GaugeSnapshot
from streams.errors import ConfigError, StackError

_SHUTDOWN_TIMEOUT_S = 0.05
"""Wall seconds aiohttp waits for a handler before cancelling it on stop or crash."""

_HEALTH_POLL_S = 0.1
"""Simulated seconds between two checks of a pending ``/health_generate``."""

_PREFIX_CACHE_ENTRIES = 100_000
"""Message prefixes remembered by the simulated prefix cache (oldest forgotten first)."""


class _BadRequest(Exception):
    """A 400 answer, with SGLang's message."""


@dataclass(frozen=True, slots=True)
class _ChatRequest:
    """The parts of a chat-completions request the simulator uses."""

    rid: str | None
    model: str | None
    messages: list[Any]
    max_tokens: int | None
    min_tokens: int
    enable_thinking: bool
    separate_reasoning: bool
    tools: list[Any]
    tool_choice: object
    priority: int | None = None


def _parse_chat(body: object, profile: SimulatorProfile) -> _ChatRequest:
    """Validate a chat-completions body. Raises :class:`_BadRequest`."""
    if not isinstance(body, dict):
        raise _BadRequest("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("'messages' must be a non-empty list.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _BadRequest(f"messages[{index}] must be an object with a string 'role'.")
    if body.get("stream") is True:
        raise _BadRequest("The simulator does not support stream=true; send stream=false.")
    if body.get("n") not in (None, 1):
        raise _BadRequest("The simulator supports only n=1.")
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise _BadRequest("'max_tokens' / 'max_completion_tokens' must be an integer.")
    if max_tokens is not None and max_tokens < 0:
        raise _BadRequest("max_new_tokens must be at least 0.")
    min_tokens = body.get("min_tokens", 0)
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise _BadRequest("'min_tokens' must be a non-negative integer.")
    template_kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise _BadRequest("'chat_template_kwargs' must be an object.")
    # SGLang 0.5.20/0.5.23 entrypoints/openai/protocol.py ChatCompletionRequest
    # normalize_reasoning_inputs: reasoning_effort only *defaults* enable_thinking
    # (ctk.setdefault("enable_thinking", effort != "none")); an explicit value wins.
    thinking = template_kwargs.get("enable_thinking")
    effort = body.get("reasoning_effort")
    if isinstance(thinking, bool):
        enable_thinking = thinking
    elif effort is not None:
        enable_thinking = effort != "none"
    else:
        enable_thinking = profile.default_enable_thinking
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise _BadRequest("'priority' must be an integer.")
    separate_reasoning = body.get("separate_reasoning", True)
    if not isinstance(separate_reasoning, bool):
        raise _BadRequest("'separate_reasoning' must be a boolean.")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _BadRequest("'tools' must be a list.")
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise _BadRequest("'rid' must be a non-empty string.")
    model = body.get("model")
    tool_choice = body.get("tool_choice")
    return _ChatRequest(
        rid=rid,
        model=model if isinstance(model, str) else None,
        messages=messages,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        enable_thinking=enable_thinking,
        separate_reasoning=separate_reasoning,
        tools=tools,
        tool_choice="auto" if tool_choice is None else tool_choice,
        priority=priority,
    )


def _join(words: tuple[str, ...]) -> str:
    """Synthetic words as text (paragraph breaks kept, one token per whitespace-separated word)."""
    return " ".join(words).replace("\n\n ", "\n\n").rstrip()


def _error(status: int, message: str, kind: str | None = None) -> web.Response:
    """SGLang's error body (``entrypoints/openai/serving_base.py`` ``create_error_response``).

    ``kind`` is its ``type``; by default 400s carry "BadRequestError", a 503 raised as an
    ``HTTPException`` (queue full) carries "503" (``handle_request``:
    ``err_type=str(e.status_code)``), anything else "InternalServerError".
    """
    if kind is None:
        kind = {400: "BadRequestError", 503: "503"}.get(status, "InternalServerError")
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def _check_loopback(host: str) -> None:
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
        _check_loopback(host)
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale}")
        self.profile = profile
        self.time_scale = time_scale
        self.host = host
        self._port = port
        self._faults = faults if faults is not None else FaultConfig()
        self._engine: Engine | None = None
        self._runner: web.AppRunner | None = None
        self._inflight: dict[str, Job] = {}
        self._rng = random.Random(profile.seed)
        self._rejected = 0
        self._error_503_left = 0
        self._error_503_until = -math.inf
        self._crash_countdown: int | None = None
        self._crash_at: float | None = None
        self._crash_timer: asyncio.TimerHandle | None = None
        self._crash_task: asyncio.Task[None] | None = None
        self._crashed = False
        self._crashed_event = asyncio.Event()
        self._started_wall = time.time()
        self._gauges = GaugeSnapshot()
        self._gauge_tick = -1
        self._known_priorities: set[int | None] = set()
        self._aborts_sent = 0
        self._cached_tokens_total = 0
        self._admitted_prompt_tokens = 0
        self._prefix_cache: dict[int, None] = {}

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
        return self._faults

    async def start(self) -> None:
        """Listen and start the engine (a fresh engine: counters, warm-up and startup restart).

        Raises:
            StackError: the port cannot be bound.
        """
        if self._runner is not None:
            raise RuntimeError("the simulator is already running")
        if self.profile.load_s > 0:  # loading the model: nothing listens yet
            await asyncio.sleep(self.profile.load_s / self.time_scale)
        self._gauges, self._gauge_tick, self._known_priorities = GaugeSnapshot(), -1, set()
        self._aborts_sent = self._cached_tokens_total = self._admitted_prompt_tokens = 0
        self._prefix_cache.clear()
        self._engine = Engine(self.profile, time_scale=self.time_scale)
        self._engine.start()
        self._crashed = False
        self._crashed_event.clear()
        self._rejected = 0
        self._started_wall = time.time()
        runner = web.AppRunner(
            self._make_app(), access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_TIMEOUT_S
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
        self._arm(self._faults, {f.name for f in fields(FaultConfig)})

    async def stop(self) -> None:
        """Stop gracefully: in-flight requests answer 503, then the socket closes."""
        self._disarm_crash_timer()
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
        self._disarm_crash_timer()
        # A crash fault is spent once it fires: a restarted server does not crash again.
        self._faults = replace(self._faults, crash_after_s=None, crash_after_requests=None)
        self._crash_countdown = None
        await runner.cleanup()  # cancels the handlers, which abort their jobs
        if self._engine is not None:
            await self._engine.close()
        self._crashed_event.set()

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
            new, changed = faults, {f.name for f in fields(FaultConfig)}
        else:
            new, changed = FaultConfig.from_mapping(changes, base=self._faults), set(changes)
        self._faults = new
        if self._runner is not None:
            self._arm(new, changed)
        return new

    def clear_faults(self) -> FaultConfig:
        """Remove every fault."""
        return self.set_faults(FaultConfig())

    def stats(self) -> SimulatorStats:
        """Counters now (for benchmarks: occupancy, throughput, aborts)."""
        engine = self._require_engine()
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
            requests_rejected=self._rejected,
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

    # -- faults --------------------------------------------------------------------------

    def _arm(self, faults: FaultConfig, changed: set[str]) -> None:
        engine = self._require_engine()
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
            self._disarm_crash_timer()
            if faults.crash_after_s is not None:
                self._crash_at = now + faults.crash_after_s
                delay = engine.wall_seconds(faults.crash_after_s)
                self._crash_timer = asyncio.get_running_loop().call_later(delay, self._spawn_crash)

    def _disarm_crash_timer(self) -> None:
        if self._crash_timer is not None:
            self._crash_timer.cancel()
        self._crash_timer = None
        self._crash_at = None

    def _spawn_crash(self) -> None:
        if self._crash_task is None or self._crash_task.done():
            self._crash_task = asyncio.get_running_loop().create_task(self.crash(), name="simulator-crash")

    def _fault_state(self) -> dict[str, Any]:
        now = self._require_engine().now()
        return {
            "faults": self._faults.to_dict(),
            "state": {
                "error_503_remaining": self._error_503_left,
                "error_503_window_left_s": max(0.0, self._error_503_until - now),
                "crash_countdown_requests": self._crash_countdown,
                "crash_in_s": None if self._crash_at is None else max(0.0, self._crash_at - now),
                "crashed": self._crashed,
            },
        }

    # -- helpers -------------------------------------------------------------------------

    def _require_engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the simulator has not been started")
        return self._engine

    def _unavailable_reason(self) -> str | None:
        if self._require_engine().now() < self.profile.startup_s:
            return "The server is starting up."
        if self._faults.draining:
            return "The server is shutting down."
        return None

    def _reject(self, status: int, message: str) -> web.Response:
        self._rejected += 1
        return _error(status, message)

    def _refresh_gauges(self) -> GaugeSnapshot:
        """The gauges as SGLang's scheduler last logged them (see :attr:`Engine.log_tick`).

        Lazy: a snapshot is taken when read after a log step, with the values at read time
        (not at the step itself); between log steps the gauges keep their last values.
        """
        engine = self._require_engine()
        engine.sync()
        if engine.log_tick != self._gauge_tick:
            self._gauge_tick = engine.log_tick
            running, queued = engine.by_priority("running"), engine.by_priority("queued")
            self._known_priorities |= set(running) | set(queued) | engine.seen_priorities
            admitted = self._admitted_prompt_tokens
            self._gauges = GaugeSnapshot(
                running=engine.running,
                queued=engine.queued,
                running_by_priority=running,
                queued_by_priority=queued,
                token_usage=round(engine.token_usage(), 2),
                gen_throughput=engine.gen_throughput(),
                cache_hit_rate=self._cached_tokens_total / admitted if admitted else 0.0,
            )
        return self._gauges

    def _cached_prefix_tokens(self, messages: list[Any], prompt_tokens: int) -> int:
        """Tokens of the longest leading run of ``messages`` an earlier request also began
        with (a message-granular stand-in for SGLang's radix prefix cache), at most
        ``prompt_tokens - 1``; remembers this request's prefixes."""
        cached = 0
        for end in range(1, len(messages) + 1):
            key = hash(repr(messages[:end]))
            if key in self._prefix_cache:
                cached = estimate_prompt_tokens(messages[:end], ())
            self._prefix_cache[key] = None
        while len(self._prefix_cache) > _PREFIX_CACHE_ENTRIES:
            del self._prefix_cache[next(iter(self._prefix_cache))]
        return max(0, min(cached, prompt_tokens - 1))

    def _abort_matching(self, rid: str) -> None:
        """SGLang's ``/abort_request {rid}`` (and a disconnect): ignored unless ``rid`` is in
        flight; then every request whose rid starts with it is aborted."""
        if rid not in self._inflight:
            return
        self._aborts_sent += 1
        engine = self._require_engine()
        for other, job in list(self._inflight.items()):
            if other.startswith(rid):
                engine.cancel(job, "abort_request")

    @web.middleware
    async def _mark(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        response.headers["X-Simulator"] = f"{self.profile.name}; sglang {self.profile.sglang_version}"
        return response

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._mark])
        app.router.add_get("/health", self._health_generate)
        app.router.add_get("/health_generate", self._health_generate)
        app.router.add_get("/server_info", self._server_info)
        app.router.add_get("/get_server_info", self._server_info)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/get_model_info", self._model_info)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/abort_request", self._abort_request)
        app.router.add_get("/simulator/faults", self._get_faults)
        app.router.add_post("/simulator/faults", self._post_faults)
        app.router.add_delete("/simulator/faults", self._delete_faults)
        app.router.add_get("/simulator/stats", self._get_stats)
        return app

    # -- SGLang endpoints ----------------------------------------------------------------

    async def _health_generate(self, request: web.Request) -> web.Response:
        """200 once any token is produced (the probe's or another request's) within the timeout."""
        if self._unavailable_reason():
            return web.Response(status=503)
        engine = self._require_engine()
        engine.sync()
        before = engine.generated_tokens
        mid_rate = (self.profile.decode_tok_s_min + self.profile.decode_tok_s_max) / 2
        probe = engine.submit(prompt_tokens=1, target_tokens=1, base_rate=mid_rate, probe=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + engine.wall_seconds(self.profile.health_check_timeout_s)
        poll = engine.wall_seconds(_HEALTH_POLL_S)
        try:
            while (left := deadline - loop.time()) > 0:
                await asyncio.wait({probe.done}, timeout=min(left, poll))
                engine.sync()
                if probe.state == "completed" or engine.generated_tokens > before + 1e-9:
                    return web.Response(status=200)
                if probe.state == "cancelled":
                    break
            return web.Response(status=503)
        finally:
            engine.cancel(probe, "health_check_done")

    async def _server_info(self, request: web.Request) -> web.Response:
        """Goes through the scheduler (``get_internal_state``): waits while the engine hangs."""
        engine = self._require_engine()
        poll = engine.wall_seconds(_HEALTH_POLL_S)
        while engine.hung:  # noqa: ASYNC110 - the engine has no "resumed" event; poll it
            await asyncio.sleep(poll)
        gauges = self._refresh_gauges()
        body = shapes.server_info(
            self.profile,
            host=self.host,
            port=self._port,
            last_gen_throughput=gauges.gen_throughput,
            startup_time=round(self.profile.load_s, 3),
        )
        return web.json_response(body)

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response(shapes.model_info(self.profile))

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(shapes.v1_models(self.profile, int(self._started_wall)))

    async def _metrics(self, request: web.Request) -> web.Response:
        engine = self._require_engine()
        gauges = self._refresh_gauges()
        counters = Counters(
            prompt_tokens=engine.finished_prompt_tokens,
            generation_tokens=engine.finished_generation_tokens,
            cached_tokens=self._cached_tokens_total,
            requests=engine.finished_requests,
            aborted=self._aborts_sent,
        )
        text = shapes.metrics_text(self.profile, gauges, counters, self._known_priorities)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _abort_request(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "The request body must be JSON.")
        if not isinstance(body, dict):
            return web.Response(status=200)
        rid = body.get("rid")
        if body.get("abort_all") is True:
            self._aborts_sent += 1
            engine = self._require_engine()
            for job in list(self._inflight.values()):
                engine.cancel(job, "abort_request")
        elif isinstance(rid, str) and rid:
            self._abort_matching(rid)
        return web.Response(status=200)

    async def _chat(self, request: web.Request) -> web.Response:
        engine = self._require_engine()
        if self._faults.draining:
            return self._reject(503, "The server is shutting down.")
        if self._crash_countdown == 0:
            self._crash_countdown = None
            self._spawn_crash()
            await asyncio.Event().wait()  # never answered: the crash cancels this handler
        elif self._crash_countdown is not None:
            self._crash_countdown -= 1
        if self._error_503_left > 0 or engine.now() < self._error_503_until:
            self._error_503_left = max(0, self._error_503_left - 1)
            return self._reject(503, "The server is overloaded (simulated 503 fault). Retry later.")
        try:
            chat = _parse_chat(await request.json(), self.profile)
        except ValueError:
            return self._reject(400, "The request body must be valid JSON.")
        except _BadRequest as exc:
            return self._reject(400, str(exc))

        prompt_tokens = estimate_prompt_tokens(chat.messages, chat.tools)
        context = self.profile.context_length
        if prompt_tokens >= context:
            return self._reject(
                400,
                f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                f"({context} tokens).",
            )
        if chat.max_tokens is not None and chat.max_tokens + prompt_tokens > context:
            total = chat.max_tokens + prompt_tokens
            return self._reject(
                400,
                f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input messages "
                f"and {chat.max_tokens} tokens for the completion. Please reduce the number of tokens in "
                "the input messages or the completion to fit within the limit.",
            )
        if chat.rid is not None and chat.rid in self._inflight:
            return self._reject(400, f"Duplicate request ID detected: {chat.rid}")
        limit = self.profile.max_queued_requests
        if limit is not None:
            engine.sync()
            if engine.queued + 1 > limit:
                return self._reject(503, "The request queue is full.")
        cached_tokens = self._cached_prefix_tokens(chat.messages, prompt_tokens)

        faults = self._faults
        abort_fraction = None
        if faults.abort_rate > 0 and self._rng.random() < faults.abort_rate:
            abort_fraction = self._rng.random()
        plan = plan_output(
            self.profile,
            seed=request_seed(chat.rid, chat.messages, self.profile.seed),
            enable_thinking=chat.enable_thinking,
            min_tokens=chat.min_tokens,
            budget=chat.max_tokens if chat.max_tokens is not None else context - prompt_tokens - 1,
            tools=chat.tools if self.profile.tool_call_parser is not None else (),
            tool_choice=chat.tool_choice,
            faults=faults,
            abort_fraction=abort_fraction,
        )
        rid = chat.rid if chat.rid is not None else f"chatcmpl-{uuid.uuid4().hex}"
        job = engine.submit(
            prompt_tokens=prompt_tokens,
            target_tokens=plan.completion_tokens,
            base_rate=plan.base_rate,
            ends_in_abort=plan.finish_reason == "abort",
            priority=chat.priority,
        )
        self._inflight[rid] = job
        self._cached_tokens_total += cached_tokens
        self._admitted_prompt_tokens += prompt_tokens
        try:
            disconnected = await self._wait(job, request, rid)
        finally:
            if self._inflight.get(rid) is job:
                del self._inflight[rid]
            engine.cancel(job, "disconnect")  # no-op unless this handler was cancelled
        if disconnected:
            return web.Response(status=499)
        if job.cancel_reason == "shutdown":
            return _error(503, "The server is shutting down.")
        queued_abort = False
        if job.cancel_reason == "abort_request":
            # Aborted while waiting: the tokenizer answers with no tokens at all (SGLang 0.5.20
            # managers/tokenizer_manager.py _handle_abort_req: meta_info has no token counts).
            queued_abort = job.admitted_at is None
            plan = plan.truncated(job.tokens, "abort")
        headers = {
            "X-Simulator-Queue-Seconds": f"{job.queue_s:.6f}",
            "X-Simulator-E2E-Seconds": f"{(job.finished_at or job.submitted_at) - job.submitted_at:.6f}",
        }
        if queued_abort:
            prompt_tokens = cached_tokens = 0
        failed = self._injected_failure(plan)
        if failed is not None:
            return failed
        body = self._chat_body(rid, chat, plan, prompt_tokens, cached_tokens)
        if faults.omit_usage:
            body.pop("usage", None)
        return web.json_response(body, headers=headers)

    def _injected_failure(self, plan: OutputPlan) -> web.Response | None:
        """The error answer a fault puts in place of a finished request's answer, if any
        (:class:`FaultConfig` ``abort_status``, ``reasoning_parse_error_rate``)."""
        faults = self._faults
        status = faults.abort_status
        if plan.finish_reason == "abort" and status is not None:
            kind = "BadRequest" if status == 400 else str(status)  # ValueError / HTTPException
            return _error(status, "Request aborted (simulated).", kind)
        rate = faults.reasoning_parse_error_rate
        if rate > 0 and self.profile.reasoning_parser is not None and self._rng.random() < rate:
            return _error(500, "Failed to parse reasoning content")
        return None

    async def _wait(self, job: Job, request: web.Request, rid: str) -> bool:
        """Wait for ``job``; ``True`` if the client disconnected first (the job is then aborted).

        Like SGLang, a waiting handler checks for a disconnect every ``disconnect_poll_s``.
        """
        engine = self._require_engine()
        poll = engine.wall_seconds(self.profile.disconnect_poll_s)
        while not job.done.done():
            done, _ = await asyncio.wait({job.done}, timeout=poll)
            transport = request.transport
            if not done and (transport is None or transport.is_closing()):
                # SGLang aborts a disconnected request through abort_request(rid): every
                # in-flight request whose rid starts with this one goes too.
                self._aborts_sent += 1
                for other, other_job in list(self._inflight.items()):
                    if other.startswith(rid) and other_job is not job:
                        engine.cancel(other_job, "abort_request")
                engine.cancel(job, "disconnect")
                return True
        return False

    def _chat_body(
        self, rid: str, chat: _ChatRequest, plan: OutputPlan, prompt_tokens: int, cached_tokens: int = 0
    ) -> dict[str, Any]:
        """The chat response for ``plan`` (see :func:`shapes.chat_response` for the shape)."""
        parser = self.profile.reasoning_parser
        reasoning = _join(plan.reasoning)
        answer = "" if plan.tool_calls else _join(plan.answer)
        reasoning_content: str | None = None
        if plan.thinking and parser is not None and chat.separate_reasoning:
            content, reasoning_content = answer, reasoning or None
        elif plan.thinking:  # unparsed: the think block stays in the content
            closed = bool(plan.answer) or plan.finish_reason in ("stop", "tool_calls")
            content = "<think>\n" + reasoning + ("\n</think>\n\n" + answer if closed else "")
        else:
            content = answer
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "reasoning_content": reasoning_content,
        }
        if plan.tool_calls:
            message["tool_calls"] = [call.to_openai(i) for i, call in enumerate(plan.tool_calls)]
        # The scheduler counts reasoning tokens only for a request in thinking mode, which needs
        # a reasoning parser (SGLang 0.5.20 serving_chat.py _get_reasoning_from_request returns
        # False without one; scheduler_components/batch_result_processor.py
        # _maybe_update_reasoning_tokens skips requests without require_reasoning).
        reasoning_tokens = len(plan.reasoning) if parser is not None and chat.enable_thinking else 0
        completion_tokens = plan.completion_tokens if prompt_tokens or plan.completion_tokens else 0
        return shapes.chat_response(
            self.profile,
            rid=rid,
            created=int(time.time()),
            model=chat.model,
            message=message,
            finish_reason=plan.finish_reason,
            matched_stop=shapes.EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
            usage_body=shapes.usage(
                self.profile,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                reasoning_tokens=min(reasoning_tokens, completion_tokens),
                cached_tokens=cached_tokens,
            ),
        )

    # -- control endpoints ---------------------------------------------------------------

    async def _get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self._fault_state())

    async def _post_faults(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "The body must be a JSON object of fault fields.")
        if not isinstance(body, Mapping):
            return _error(400, "The body must be a JSON object of fault fields.")
        try:
            self.set_faults(**body)
        except ConfigError as exc:
            return _error(400, str(exc))
        return web.json_response(self._fault_state())

    async def _delete_faults(self, request: web.Request) -> web.Response:
        self.clear_faults()
        return web.json_response(self._fault_state())

    async def _get_stats(self, request: web.Request) -> web.Response:
        stats = self.stats()
        body = asdict(stats) | {
            "mean_running": stats.mean_running,
            "mean_queued": stats.mean_queued,
            "occupancy": stats.occupancy,
        }
        return web.json_response(body)
