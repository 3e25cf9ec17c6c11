"""The simulator's own control endpoints (not in SGLang): ``GET|POST|DELETE /simulator/faults``
(read, change or clear the faults; bodies are :class:`~simulator.profile.FaultConfig` fields)
and ``GET /simulator/stats`` (:class:`~simulator.engine.SimulatorStats` and its derived figures)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING

from aiohttp import web

from simulator.answers import error_response
from streams.errors import ConfigError

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["ControlRoutes"]


class ControlRoutes:
    """The handlers of the control endpoints for ``server``."""

    def __init__(self, server: SimulatedServer) -> None:
        self.server = server

    def register(self, router: web.UrlDispatcher) -> None:
        """Add this family's routes to ``router``."""
        router.add_get("/simulator/faults", self.get_faults)
        router.add_post("/simulator/faults", self.post_faults)
        router.add_delete("/simulator/faults", self.delete_faults)
        router.add_get("/simulator/stats", self.get_stats)

    async def get_faults(self, request: web.Request) -> web.Response:
        """The faults and their armed state (:meth:`FaultControl.state`)."""
        return web.json_response(self.server.fault_state())

    async def post_faults(self, request: web.Request) -> web.Response:
        """Change the fields the JSON object names; 400 for a bad body, field or value."""
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "The body must be a JSON object of fault fields.")
        if not isinstance(body, Mapping):
            return error_response(400, "The body must be a JSON object of fault fields.")
        try:
            self.server.set_faults(**body)
        except ConfigError as exc:
            return error_response(400, str(exc))
        return web.json_response(self.server.fault_state())

    async def delete_faults(self, request: web.Request) -> web.Response:
        """Clear every fault."""
        self.server.clear_faults()
        return web.json_response(self.server.fault_state())

    async def get_stats(self, request: web.Request) -> web.Response:
        """The server's counters now, with mean running, mean queued and occupancy."""
        stats = self.server.stats()
        body = asdict(stats) | {
            "mean_running": stats.mean_running,
            "mean_queued": stats.mean_queued,
            "occupancy": stats.occupancy,
        }
        return web.json_response(body)
