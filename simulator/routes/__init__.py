"""The simulator's HTTP endpoints, one module per family: SGLang's server endpoints
(:mod:`.info`: health, server and model info, metrics), the generation endpoints
(:mod:`.chat`: chat completions, abort) and the simulator's own control endpoints
(:mod:`.control`: faults, stats). The other personas (:mod:`.personas`: vLLM, a generic
OpenAI-compatible server) serve their own server endpoints and speak their own chat dialect.
:func:`add_routes` registers a persona's endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from simulator.routes.chat import ChatRoutes
from simulator.routes.control import ControlRoutes
from simulator.routes.info import InfoRoutes
from simulator.routes.personas import DIALECTS, VllmInfoRoutes, generic_models_route

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["ChatRoutes", "ControlRoutes", "InfoRoutes", "add_routes"]


def add_routes(app: web.Application, server: SimulatedServer) -> None:
    """Register every endpoint of ``server``'s persona on ``app`` (the control endpoints always)."""
    persona = server.profile.persona
    if persona == "sglang":
        InfoRoutes(server).register(app.router)
    elif persona == "vllm":
        VllmInfoRoutes(server).register(app.router)
    else:
        app.router.add_routes([generic_models_route(server)])
    ChatRoutes(server, DIALECTS[persona]).register(app.router)
    ControlRoutes(server).register(app.router)
