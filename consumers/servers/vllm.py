"""vLLM's OpenAI-compatible server (``vllm serve``): recognised by its ``vllm:*`` series on
``/metrics``, else by its ``/version`` answer.

Facts from vLLM 0.11.0 source (docs/vllm.md): ``/version``, ``/v1/models`` ``max_model_len``;
load ``vllm:num_requests_running``/``num_requests_waiting``/``kv_cache_usage_perc`` per DP
``engine``; the request id field is ``request_id``; no slot count is served.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from consumers.servers.base import LoadSeries, ServerHttp, ServerInfo, ServerKind, json_object
from streams.config import GenerationSettings
from streams.records import PromptRecord

__all__ = ["VLLM"]

_SGLANG_ONLY = ("rid", "separate_reasoning")
"""request fields vLLM does not know: it logs a warning for each request carrying one."""


class VLLM(ServerKind):
    """vLLM's discovery (``/v1/models`` + ``/version``) and ``vllm:*`` load series. Health is the
    base's 1-token chat completion: vLLM's ``/health`` checks that the engine is alive, not that
    it generates."""

    name: ClassVar[str] = "vllm"
    probe_paths: ClassVar[tuple[str, ...]] = ("/metrics", "/version")
    load_series: ClassVar[LoadSeries | None] = LoadSeries(
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "engine"
    )

    def recognises(self, path: str, body: bytes) -> bool:
        """``/metrics``: Prometheus text holding vLLM's running-requests gauge (absent with
        ``--disable-log-stats``); ``/version``: a JSON object of ``version`` alone."""
        if path == "/metrics":
            return b"vllm:num_requests_running" in body
        data = json_object(body)
        return data is not None and set(data) == {"version"} and isinstance(data["version"], str)

    async def read_info(
        self, server: ServerHttp, *, models: dict[str, Any], default_model: str
    ) -> ServerInfo:
        """Model: the first ``/v1/models`` id; slots: unknown (``max_num_seqs`` is not served);
        context: ``max_model_len``; version: ``/version``."""
        info = await super().read_info(server, models=models, default_model=default_model)
        version = await server.get_json("/version")
        return dataclasses.replace(info, version=version.get("version"), raw={**info.raw, "version": version})

    def request_body(
        self, prompt: PromptRecord, rid: str, generation: GenerationSettings, *, model: str | None
    ) -> dict[str, Any]:
        """The shared body with the request id as vLLM's ``request_id`` and SGLang's own fields
        left out."""
        body = super().request_body(prompt, rid, generation, model=model)
        for name in _SGLANG_ONLY:
            body.pop(name, None)
        body["request_id"] = rid
        return body
