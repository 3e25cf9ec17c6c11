"""SGLang (production): recognised by ``/server_info`` (pre-0.4: ``/get_server_info``).

Facts: docs/sglang.md ("Discovery", "Endpoints"), from SGLang 0.5.20/0.5.23 source.
"""

from __future__ import annotations

from typing import Any, ClassVar

from consumers.servers.answers import int_or_none
from consumers.servers.base import LoadSeries, ServerHttp, ServerInfo, ServerKind, json_object, max_model_len

__all__ = ["SGLang", "sglang_running_limit"]


class SGLang(ServerKind):
    """SGLang's discovery (``/server_info`` + ``/model_info``), its generation probe
    ``/health_generate`` and its ``sglang:*`` load series."""

    name: ClassVar[str] = "sglang"
    probe_paths: ClassVar[tuple[str, ...]] = ("/server_info", "/get_server_info")
    load_series: ClassVar[LoadSeries | None] = LoadSeries(
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"
    )

    def recognises(self, path: str, body: bytes) -> bool:
        """A JSON object of SGLang's server arguments (``model_path``): vLLM answers
        ``/server_info`` too, with ``{"vllm_config": ...}``, when ``VLLM_SERVER_DEV_MODE`` is set
        (vLLM 0.11.0 ``entrypoints/openai/api_server.py``; docs/vllm.md)."""
        data = json_object(body)
        return data is not None and "model_path" in data

    async def read_info(
        self, server: ServerHttp, *, models: dict[str, Any], default_model: str
    ) -> ServerInfo:
        """Model: ``/model_info`` ``served_model_name`` or ``model_path``; slots:
        :func:`sglang_running_limit`; context: ``/v1/models`` ``max_model_len`` (the length
        really used), else ``/server_info`` ``context_length``."""
        info = await server.get_json("/server_info", "/get_server_info")
        model = await server.get_json("/model_info", "/get_model_info")
        name = model.get("served_model_name") or model.get("model_path") or info.get("served_model_name")
        return ServerInfo(
            url=server.base_url,
            kind=self.name,
            model=str(name or default_model),
            max_running_requests=sglang_running_limit(info),
            context_length=max_model_len(models) or int_or_none(info.get("context_length")),
            version=info.get("version"),
            max_total_num_tokens=int_or_none(info.get("max_total_num_tokens")),
            # n copies of a request share its sampling params; with deterministic inference the
            # seed is honoured, and how each copy's seed is derived differs between versions
            parallel_samples=bool(info) and not info.get("enable_deterministic_inference", False),
            raw={"server_info": info, "model_info": model, "models": models},
        )

    async def healthy(self, server: ServerHttp, *, model: str, timeout_s: float) -> bool:
        """``GET /health_generate``: it submits a 1-token generation and passes once the
        scheduler produced output (since 0.5 ``/health`` is the same handler; in 0.4.x it was a
        plain 200; docs/sglang.md, "Endpoints")."""
        return await server.status_of("GET", "/health_generate", timeout_s=timeout_s) == 200


def sglang_running_limit(server_info: dict[str, Any]) -> int | None:
    """The number of requests an SGLang server runs at once, from its ``/server_info``.

    The sum over data-parallel ranks of ``internal_states[i].effective_max_running_requests_per_dp``
    (what each rank's scheduler really uses, automatic defaults included); the top-level
    ``max_running_requests`` only when no rank reports it (it is the command-line value, null by
    default). SGLang 0.5.20/0.5.23 ``entrypoints/http_server.py`` ``server_info``,
    ``managers/scheduler.py`` ``get_internal_state``; docs/sglang.md, "Discovery".
    """
    states = server_info.get("internal_states")
    per_rank = [
        int_or_none(state.get("effective_max_running_requests_per_dp"))
        for state in (states if isinstance(states, list) else [])
        if isinstance(state, dict)
    ]
    if per_rank and all(n is not None and n > 0 for n in per_rank):
        return sum(n for n in per_rank if n is not None)
    return int_or_none(server_info.get("max_running_requests"))
