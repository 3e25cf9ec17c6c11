"""SGLang's server endpoints: ``GET /health`` and ``/health_generate``, ``/server_info`` (and
``/get_server_info``), ``/model_info`` (and ``/get_model_info``), ``/v1/models``, ``/metrics``.

Mirrored from SGLang 0.5.20 / 0.5.23 (paths under ``python/sglang/srt/``):

* ``/health`` *is* ``/health_generate`` (``entrypoints/http_server.py`` ``health_generate``
  serves both; ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` defaults to true in
  ``environ.py``): 503 while starting or shutting down, else a 1-token probe that answers 200
  as soon as any output arrives and 503 after ``health_check_timeout_s``.
* ``/server_info`` asks the scheduler (``managers/tokenizer_manager.py`` /
  ``tokenizer_control_mixin.py`` ``get_internal_state``), so it hangs while the engine hangs.
* ``/metrics`` gauges refresh only when the scheduler logs stats (see
  :meth:`simulator.telemetry.Telemetry.refresh_gauges`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from simulator import shapes

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["HEALTH_POLL_S", "InfoRoutes"]

HEALTH_POLL_S = 0.1
"""Simulated seconds between two checks of a pending ``/health_generate`` (or of a hung engine)."""


class InfoRoutes:
    """The handlers of SGLang's server endpoints for ``server``."""

    def __init__(self, server: SimulatedServer) -> None:
        self.server = server

    def register(self, router: web.UrlDispatcher) -> None:
        """Add this family's routes to ``router``."""
        router.add_get("/health", self.health_generate)
        router.add_get("/health_generate", self.health_generate)
        router.add_get("/server_info", self.server_info)
        router.add_get("/get_server_info", self.server_info)
        router.add_get("/model_info", self.model_info)
        router.add_get("/get_model_info", self.model_info)
        router.add_get("/v1/models", self.models)
        router.add_get("/metrics", self.metrics)

    def unavailable_reason(self) -> str | None:
        """Why the health endpoints answer 503 now (warming up, draining), None when they probe."""
        if self.server.engine.now() < self.server.profile.startup_s:
            return "The server is starting up."
        if self.server.faults.draining:
            return "The server is shutting down."
        return None

    async def health_generate(self, request: web.Request) -> web.Response:
        """200 once any token is produced (the probe's or another request's) within the timeout."""
        if self.unavailable_reason():
            return web.Response(status=503)
        profile, engine = self.server.profile, self.server.engine
        engine.sync()
        before = engine.generated_tokens
        mid_rate = (profile.decode_tok_s_min + profile.decode_tok_s_max) / 2
        probe = engine.submit(prompt_tokens=1, target_tokens=1, base_rate=mid_rate, probe=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + engine.wall_seconds(profile.health_check_timeout_s)
        poll = engine.wall_seconds(HEALTH_POLL_S)
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

    async def server_info(self, request: web.Request) -> web.Response:
        """Goes through the scheduler (``get_internal_state``): waits while the engine hangs."""
        server = self.server
        engine = server.engine
        poll = engine.wall_seconds(HEALTH_POLL_S)
        while engine.hung:  # noqa: ASYNC110 - the engine has no "resumed" event; poll it
            await asyncio.sleep(poll)
        gauges = server.telemetry.refresh_gauges(engine)
        body = shapes.server_info(
            server.profile,
            host=server.host,
            port=server.port,
            last_gen_throughput=gauges.gen_throughput,
            startup_time=round(server.profile.load_s, 3),
        )
        return web.json_response(body)

    async def model_info(self, request: web.Request) -> web.Response:
        """``/model_info``: the served model (:func:`shapes.model_info`)."""
        return web.json_response(shapes.model_info(self.server.profile))

    async def models(self, request: web.Request) -> web.Response:
        """``/v1/models``: the OpenAI model list, created at the server's start."""
        return web.json_response(shapes.v1_models(self.server.profile, int(self.server.started_wall)))

    async def metrics(self, request: web.Request) -> web.Response:
        """``/metrics``: Prometheus text of the gauges as last logged and the counters now."""
        server = self.server
        engine = server.engine
        telemetry = server.telemetry
        gauges = telemetry.refresh_gauges(engine)
        counters = telemetry.counters(engine)
        text = shapes.metrics_text(server.profile, gauges, counters, telemetry.known_priorities)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")
