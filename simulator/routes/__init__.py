"""The simulator's HTTP endpoints, one module per family: SGLang's server endpoints
(:mod:`.info`: health, server and model info, metrics), the generation endpoints
(:mod:`.chat`: chat completions, abort) and the simulator's own control endpoints
(:mod:`.control`: faults, stats). :func:`add_routes` registers them all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from simulator.routes.chat import ChatRoutes
from simulator.routes.control import ControlRoutes
from simulator.routes.info import InfoRoutes

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["ChatRoutes", "ControlRoutes", "InfoRoutes", "add_routes"]


def add_routes(app: web.Application, server: SimulatedServer) -> None:
    """Register every endpoint of ``server`` on ``app``."""
    InfoRoutes(server).register(app.router)
    ChatRoutes(server).register(app.router)
    ControlRoutes(server).register(app.router)
