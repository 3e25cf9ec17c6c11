"""The simulator's personas other than SGLang: **vLLM 0.11.0** and a **generic
OpenAI-compatible** server. Each is a :class:`Dialect` (what the chat endpoint answers: body,
usage, errors, the request id field) and, for vLLM, its server endpoints
(:class:`VllmInfoRoutes`).

vLLM, from the source of the wheel ``vllm-0.11.0`` (paths under ``vllm/``; docs/vllm.md):

* Endpoints: ``GET /health`` (200 while the engine lives; it does not generate),
  ``/version`` (``{"version": "0.11.0"}``), ``/v1/models`` (``ModelCard`` with ``max_model_len``),
  ``/metrics`` (``v1/metrics/loggers.py`` ``PrometheusStatLogger``: the gauges
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
  and the token counters, labels ``model_name`` and ``engine``; refreshed every engine step, so
  live here). No ``/server_info``, ``/get_server_info``, ``/model_info``, ``/abort_request``.
* Requests: the id is ``request_id``; the response's ``id`` is ``"chatcmpl-" + request_id``
  (``entrypoints/openai/serving_chat.py`` ``create_chat_completion``); a second request under an
  id in flight is a 400 "Request id chatcmpl-ID already running." (``v1/engine/output_processor.py``
  ``add_request``). ``rid`` and ``separate_reasoning`` are unknown fields, ignored: vLLM always
  splits the reasoning when it has a parser. A ``model`` other than the served one is a 404
  ``NotFoundError`` (``serving_engine.py`` ``_check_model``).
* Answers: ``ChatCompletionResponse.model_dump()`` (``entrypoints/openai/protocol.py``): every
  field, ``None`` included; ``ChatMessage.reasoning_content``; ``tool_calls`` a list (``[]``);
  ``UsageInfo`` without reasoning tokens, ``prompt_tokens_details`` only with
  ``--enable-prompt-tokens-details`` and cached tokens. The qwen3 parser splits only an output
  holding both ``<think>`` and ``</think>`` (``reasoning/qwen3_reasoning_parser.py``).
* Errors: ``ErrorResponse`` ``{"error": {"message", "type", "param", "code"}}``
  (``serving_engine.py`` ``create_error_response``); a bad body is a 400 "Bad Request"
  (``api_server.py`` ``validation_exception_handler``); the context checks are
  ``serving_engine.py`` ``_validate_input``'s, worded ``f"{e} {e.__cause__}"`` (ends in " None").
* Aborts: only a client disconnect (``entrypoints/utils.py`` ``with_cancellation``).

The generic persona serves ``/v1/models`` (id, object, created, owned_by: no context length)
and ``/v1/chat/completions`` with OpenAI's plain shapes, errors as vLLM's (OpenAI's error
object), ``reasoning_content`` when it has a reasoning parser; no metrics, no health endpoint.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from simulator import shapes
from simulator.answers import chat_body, error_response
from simulator.chat_request import ChatRequest, context_error
from simulator.output import OutputPlan
from simulator.profile import VLLM_VERSION, SimulatorProfile

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["DIALECTS", "Dialect", "OpenAIDialect", "VllmDialect", "VllmInfoRoutes", "generic_models"]


class Dialect:
    """What the chat endpoint answers, SGLang's way (the base; the other personas override)."""

    id_field = "rid"
    """the body field that carries the client's request id."""
    aborts_by_prefix = True
    """whether a disconnect aborts every request whose id starts with the client's (SGLang)."""

    def error(self, status: int, message: str, kind: str | None = None) -> web.Response:
        """The error answer (SGLang's body; :func:`simulator.answers.error_response`)."""
        return error_response(status, message, kind)

    def bad_body(self, message: str) -> web.Response:
        """The answer to a body that fails validation."""
        return self.error(400, message)

    def context_error(self, prompt_tokens: int, max_tokens: int | None, context: int) -> str | None:
        """The 400 message of a request that does not fit the context, or None."""
        return context_error(prompt_tokens, max_tokens, context)

    def refusal(self, chat: ChatRequest, profile: SimulatorProfile, in_flight: bool) -> web.Response | None:
        """The error answer to a request refused before it runs (a duplicate id), or None."""
        if chat.rid is not None and in_flight:
            return self.error(400, f"Duplicate request ID detected: {chat.rid}")
        return None

    def response_id(self, rid: str | None, fresh: str) -> str:
        """The response's ``id`` (``fresh``: a random id)."""
        return rid if rid is not None else fresh

    def body(
        self,
        profile: SimulatorProfile,
        rid: str,
        chat: ChatRequest,
        plan: OutputPlan,
        prompt_tokens: int,
        cached_tokens: int,
    ) -> dict[str, Any]:
        """The chat response of one finished generation."""
        return chat_body(profile, rid, chat, plan, prompt_tokens, cached_tokens)

    def usage(
        self, profile: SimulatorProfile, *, prompt_tokens: int, completions: list[dict[str, Any]], cached: int
    ) -> dict[str, Any]:
        """The usage of ``n`` choices (``completions``: their bodies): the prompt once, completions summed."""
        return shapes.usage(
            profile,
            prompt_tokens=prompt_tokens,
            completion_tokens=sum(b["usage"]["completion_tokens"] for b in completions),
            reasoning_tokens=sum(b["usage"]["reasoning_tokens"] for b in completions),
            cached_tokens=cached,
        )


def _openai_error(status: int, message: str, kind: str) -> web.Response:
    """vLLM's ``ErrorResponse`` (OpenAI's error object)."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


def _split(profile: SimulatorProfile, plan: OutputPlan) -> tuple[str | None, str | None]:
    """``(content, reasoning_content)`` as vLLM's reasoning parser splits the output: only a
    closed ``<think>`` block is split; without a parser the block stays in the content."""
    reasoning = " ".join(plan.reasoning).replace("\n\n ", "\n\n").rstrip()
    answer = None if plan.tool_calls else " ".join(plan.answer).replace("\n\n ", "\n\n").rstrip()
    if not plan.thinking:
        return answer, None
    closed = bool(plan.answer) or plan.finish_reason in ("stop", "tool_calls")
    if not closed:
        return "<think>\n" + reasoning, None
    if profile.reasoning_parser is not None:
        return answer, reasoning or None
    return "<think>\n" + reasoning + "\n</think>\n\n" + (answer or ""), None


class VllmDialect(Dialect):
    """vLLM 0.11.0's chat answers (see the module docstring)."""

    id_field = "request_id"
    aborts_by_prefix = False

    def error(self, status: int, message: str, kind: str | None = None) -> web.Response:
        """``ErrorResponse``; ``type`` "BadRequestError" for 400s, "ServiceUnavailableError" for
        503s, else "InternalServerError"."""
        if kind is None or kind.isdigit():
            kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
                status, "InternalServerError"
            )
        return _openai_error(status, message, kind)

    def bad_body(self, message: str) -> web.Response:
        """FastAPI's validation error as vLLM words it: type "Bad Request"."""
        return _openai_error(400, message, "Bad Request")

    def context_error(self, prompt_tokens: int, max_tokens: int | None, context: int) -> str | None:
        """``serving_engine.py`` ``_validate_input``, worded by the chat endpoint (`` None`` at the end)."""
        if prompt_tokens >= context:
            return (
                f"This model's maximum context length is {context} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages. None"
            )
        if max_tokens is not None and prompt_tokens + max_tokens > context:
            return (
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                f"maximum context length is {context} tokens and your request has {prompt_tokens} "
                f"input tokens ({max_tokens} > {context} - {prompt_tokens}). None"
            )
        return None

    def refusal(self, chat: ChatRequest, profile: SimulatorProfile, in_flight: bool) -> web.Response | None:
        """A model not served (404), a request id already in flight (400), tools with "auto" tool
        choice on a server without a tool parser (400)."""
        if chat.model is not None and chat.model != profile.served_model_name:
            return self.error(404, f"The model `{chat.model}` does not exist.")
        if chat.rid is not None and in_flight:
            return self.error(400, f"Request id chatcmpl-{chat.rid} already running.")
        if chat.tools and chat.tool_choice == "auto" and profile.tool_call_parser is None:
            # serving_chat.py create_chat_completion
            return self.error(
                400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            )
        return None

    def response_id(self, rid: str | None, fresh: str) -> str:
        """``"chatcmpl-" + request_id``."""
        return f"chatcmpl-{rid}" if rid is not None else fresh

    def body(
        self,
        profile: SimulatorProfile,
        rid: str,
        chat: ChatRequest,
        plan: OutputPlan,
        prompt_tokens: int,
        cached_tokens: int,
    ) -> dict[str, Any]:
        """``ChatCompletionResponse.model_dump()`` (``tests/fixtures/vllm/0.11.0/chat_*.json``)."""
        content, reasoning = _split(profile, plan)
        calls = [
            {k: v for k, v in call.to_openai(i).items() if k != "index"}
            for i, call in enumerate(plan.tool_calls)
        ]
        message = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": calls,
            "reasoning_content": reasoning,
        }
        completion = plan.completion_tokens if prompt_tokens or plan.completion_tokens else 0
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None}
        choice |= {"finish_reason": plan.finish_reason, "stop_reason": None, "token_ids": None}
        return {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": profile.served_model_name,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self._usage(profile, prompt_tokens, completion, cached_tokens),
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }

    @staticmethod
    def _usage(profile: SimulatorProfile, prompt: int, completion: int, cached: int) -> dict[str, Any]:
        details = {"cached_tokens": cached} if profile.enable_cache_report and cached else None
        usage = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
        return usage | {"prompt_tokens_details": details}

    def usage(
        self, profile: SimulatorProfile, *, prompt_tokens: int, completions: list[dict[str, Any]], cached: int
    ) -> dict[str, Any]:
        """``UsageInfo`` of ``n`` choices."""
        completion = sum(b["usage"]["completion_tokens"] for b in completions)
        return self._usage(profile, prompt_tokens, completion, cached)


class OpenAIDialect(VllmDialect):
    """A generic OpenAI-compatible server: OpenAI's plain chat completion, no request id field."""

    id_field = ""

    def refusal(self, chat: ChatRequest, profile: SimulatorProfile, in_flight: bool) -> web.Response | None:
        """A model not served (404)."""
        if chat.model is not None and chat.model != profile.served_model_name:
            return self.error(404, f"The model `{chat.model}` does not exist.")
        return None

    def response_id(self, rid: str | None, fresh: str) -> str:
        """Always a fresh id: the server knows no client id."""
        return fresh

    def body(
        self,
        profile: SimulatorProfile,
        rid: str,
        chat: ChatRequest,
        plan: OutputPlan,
        prompt_tokens: int,
        cached_tokens: int,
    ) -> dict[str, Any]:
        """``id, object, created, model, choices, usage`` with only OpenAI's fields (and
        ``reasoning_content`` when the reasoning is split)."""
        body = super().body(profile, rid, chat, plan, prompt_tokens, cached_tokens)
        message = body["choices"][0]["message"]
        kept = {"role": message["role"], "content": message["content"]}
        if message["reasoning_content"] is not None:
            kept["reasoning_content"] = message["reasoning_content"]
        if message["tool_calls"]:
            kept["tool_calls"] = message["tool_calls"]
        choice = {"index": 0, "message": kept, "logprobs": None, "finish_reason": plan.finish_reason}
        keys = ("id", "object", "created", "model")
        return {k: body[k] for k in keys} | {"choices": [choice], "usage": self._plain(body["usage"])}

    @staticmethod
    def _plain(usage: dict[str, Any]) -> dict[str, Any]:
        return {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}

    def usage(
        self, profile: SimulatorProfile, *, prompt_tokens: int, completions: list[dict[str, Any]], cached: int
    ) -> dict[str, Any]:
        """OpenAI's usage of ``n`` choices."""
        return self._plain(
            super().usage(profile, prompt_tokens=prompt_tokens, completions=completions, cached=0)
        )


DIALECTS: dict[str, Dialect] = {"sglang": Dialect(), "vllm": VllmDialect(), "openai": OpenAIDialect()}
"""each persona's chat dialect."""


def generic_models(profile: SimulatorProfile, created: int) -> dict[str, Any]:
    """``GET /v1/models`` of a generic server: OpenAI's model object, no context length."""
    card = {"id": profile.served_model_name, "object": "model", "created": created, "owned_by": "openai"}
    return {"object": "list", "data": [card]}


class VllmInfoRoutes:
    """vLLM 0.11.0's server endpoints for ``server`` (see the module docstring)."""

    def __init__(self, server: SimulatedServer) -> None:
        self.server = server

    def register(self, router: web.UrlDispatcher) -> None:
        """Add ``/health``, ``/version``, ``/v1/models`` and ``/metrics`` to ``router``."""
        router.add_get("/health", self.health)
        router.add_get("/version", self.version)
        router.add_get("/v1/models", self.models)
        router.add_get("/metrics", self.metrics)

    async def health(self, request: web.Request) -> web.Response:
        """200: the engine lives (a hung engine too: the check does not generate)."""
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        """``{"version": "0.11.0"}``."""
        return web.json_response({"version": VLLM_VERSION})

    async def models(self, request: web.Request) -> web.Response:
        """``ModelList`` of one ``ModelCard`` (``tests/fixtures/vllm/0.11.0/v1_models.json``)."""
        p = self.server.profile
        created = int(self.server.started_wall)
        card = {"id": p.served_model_name, "object": "model", "created": created, "owned_by": "vllm"}
        card |= {"root": p.model_path, "parent": None, "max_model_len": p.context_length}
        card["permission"] = [
            {
                "id": f"modelperm-{p.seed:032x}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ]
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text of vLLM's scheduler gauges and token counters, now."""
        server = self.server
        engine = server.engine
        engine.sync()
        counters = server.telemetry.counters(engine)
        labels = f'{{model_name="{server.profile.served_model_name}",engine="0"}}'
        lines: list[str] = []
        series = (
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
            ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
            ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
        )
        gauges = (engine.running, engine.queued, round(engine.token_usage(), 4))
        values = (*gauges, counters.prompt_tokens, counters.generation_tokens)
        for (name, kind, doc), value in zip(series, values, strict=True):
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{labels} {float(value)!r}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


def generic_models_route(server: SimulatedServer) -> web.RouteDef:
    """The generic persona's ``GET /v1/models``."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response(generic_models(server.profile, int(server.started_wall)))

    return web.get("/v1/models", models)
