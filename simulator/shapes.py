"""SGLang's response bodies, per SGLang version (``SimulatorProfile.sglang_version``).

Every shape here was read in SGLang's source (the official wheels, paths under
``python/sglang/srt/``) and is pinned by the fixtures in ``tests/fixtures/sglang/<version>/``
(their README cites the file and function per response). What differs between versions:

* ``usage``: SGLang 0.5.20 ``entrypoints/openai/usage_processor.py``
  ``UsageProcessor.calculate_response_usage`` reports ``prompt_tokens_details`` only when
  something was cached (``_details_if_cached``: null for 0 cached tokens, even with
  ``--enable-cache-report``) and has no ``completion_tokens_details``; 0.5.23 reports
  ``{"cached_tokens": N}`` whenever ``--enable-cache-report`` is on (0 included) and adds
  ``completion_tokens_details`` ``{"reasoning_tokens": N}`` (null when N is 0;
  ``calculate_token_usage``).
* ``message.tool_calls``: 0.5.20 ``entrypoints/openai/protocol.py`` ``ChatMessage`` always has
  the key (null without calls); 0.5.23's serializer drops it when null.
* ``/server_info``: 0.5.23 adds ``"frontend": "python"`` (``entrypoints/http_server.py``
  ``server_info``); ``/model_info``: 0.5.23 adds ``disaggregation_mode`` ("null").

Common to both (SGLang 0.5.20 and 0.5.23):

* ``/server_info`` (``entrypoints/http_server.py`` ``server_info``): the resolved server args at
  the top level (``max_running_requests``, ``context_length``, ``max_queued_requests`` null
  unless given on the command line), ``launch_command``, the scheduler's init info
  (``max_total_num_tokens``, ``max_req_input_len``), ``startup_time``, ``internal_states`` (one
  dict per DP rank: the server args again plus ``world_size``, ``last_gen_throughput``,
  ``memory_usage``, ``startup_time``, ``effective_max_running_requests_per_dp``; 0.5.20
  ``managers/scheduler.py`` ``Scheduler.get_internal_state``), ``version`` and ``kv_events``.
  Abridged here to the server-arg fields listed in :data:`_SERVER_ARG_FIELDS` (SGLang repeats
  all ~500).
* ``/v1/models`` (``http_server.py`` ``available_models``, ``protocol.py`` ``ModelCard``):
  ``root`` is the served name, ``parent`` null, ``max_model_len`` the context length.
* Chat (``entrypoints/openai/serving_chat.py`` ``_build_chat_response``): ``id`` is the rid
  (``chatcmpl-<hex>`` by default, ``serving_base.py`` / ``serving_chat.py``
  ``_request_id_prefix``), ``model`` echoes the request's (default "default",
  ``protocol.py`` ``DEFAULT_MODEL_NAME``), ``choices[i].matched_stop`` (the stop token id for an
  EOS stop, else null), ``metadata`` ``{"weight_version": "default"}``
  (``utils/weight_versions.py`` ``build_endpoint_weight_version_metadata``).
* ``/metrics`` (``observability/metrics_collector.py``): scheduler gauges labelled
  ``engine_type, model_name, moe_ep_rank, pp_rank, tp_rank`` (``SchedulerMetricsCollector.init_new``),
  tokenizer counters labelled ``engine_type, model_name`` plus ``is_streaming`` on the token and
  request counters (``TokenizerMetricsCollector``); ``priority=""`` on all of them with
  ``--enable-priority-scheduling``, plus ``priority="<int>"`` series for the running and queued
  gauges (``_log_gauge_queue_count``). Prometheus multiprocess text: labels sorted, a counter's
  family named without ``_total``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.profile import SimulatorProfile

__all__ = [
    "DEFAULT_MODEL_NAME",
    "EOS_TOKEN_ID",
    "Counters",
    "GaugeSnapshot",
    "chat_response",
    "metrics_text",
    "model_info",
    "server_info",
    "usage",
    "v1_models",
]

EOS_TOKEN_ID = 151645
"""``<|im_end|>`` in the Qwen3 tokenizer: ``matched_stop`` of an answer that ended on EOS."""

DEFAULT_MODEL_NAME = "default"
"""``model`` of a response whose request named none (SGLang ``protocol.py`` ``DEFAULT_MODEL_NAME``)."""


def _server_args(profile: SimulatorProfile, host: str, port: int) -> dict[str, Any]:
    """The abridged resolved server args (values SGLang would report for this profile)."""
    return {
        "model_path": profile.model_path,
        "tokenizer_path": profile.model_path,
        "served_model_name": profile.served_model_name,
        "host": host,
        "port": port,
        "context_length": profile.context_length if profile.context_length_set else None,
        "max_running_requests": profile.max_running_requests if profile.max_running_requests_set else None,
        "max_queued_requests": profile.max_queued_requests,
        "max_total_tokens": None,
        "chunked_prefill_size": 8192,
        "mem_fraction_static": 0.836,
        "schedule_policy": "fcfs",
        "enable_priority_scheduling": profile.enable_priority_scheduling,
        "enable_deterministic_inference": profile.enable_deterministic_inference,
        "tp_size": 1,
        "dp_size": 1,
        "reasoning_parser": profile.reasoning_parser,
        "tool_call_parser": profile.tool_call_parser,
        "enable_metrics": True,
        "enable_cache_report": profile.enable_cache_report,
        "decode_log_interval": profile.decode_log_interval,
        "weight_version": "default",
    }


_SERVER_ARG_FIELDS = tuple(_server_args(SimulatorProfile(), "127.0.0.1", 0))
"""The ``ServerArgs`` fields the abridged ``/server_info`` carries."""


def _launch_command(profile: SimulatorProfile, host: str, port: int) -> str:
    parts = ["python3 -m sglang.launch_server", f"--model-path {profile.model_path}"]
    parts += [f"--served-model-name {profile.served_model_name}", f"--host {host}", f"--port {port}"]
    if profile.reasoning_parser is not None:
        parts.append(f"--reasoning-parser {profile.reasoning_parser}")
    if profile.tool_call_parser is not None:
        parts.append(f"--tool-call-parser {profile.tool_call_parser}")
    parts.append("--enable-metrics")
    if profile.enable_cache_report:
        parts.append("--enable-cache-report")
    if profile.max_running_requests_set:
        parts.append(f"--max-running-requests {profile.max_running_requests}")
    if profile.context_length_set:
        parts.append(f"--context-length {profile.context_length}")
    if profile.max_queued_requests is not None:
        parts.append(f"--max-queued-requests {profile.max_queued_requests}")
    if profile.enable_priority_scheduling:
        parts.append("--enable-priority-scheduling")
    if profile.enable_deterministic_inference:
        parts.append("--enable-deterministic-inference")
    return " ".join(parts)


def server_info(
    profile: SimulatorProfile, *, host: str, port: int, last_gen_throughput: float, startup_time: float
) -> dict[str, Any]:
    """``GET /server_info`` (abridged; see the module docstring). Throughput in tokens/s."""
    args = _server_args(profile, host, port)
    kv_gb = round(profile.max_total_num_tokens * 147_456 / 2**30, 3)  # Qwen3-8B: 144 KiB per token
    memory = {
        "weight": 15.27,
        "kvcache": kv_gb,
        "startup_available": 78.52,
        "token_capacity": profile.max_total_num_tokens,
        "token_capacity_swa": None,
        "graph": {"decode": 1.14},
    }
    if profile.sglang_version == "0.5.20":
        state = args | {
            "world_size": 1,
            "last_gen_throughput": last_gen_throughput,
            "memory_usage": memory,
            "startup_time": startup_time,
            "effective_max_running_requests_per_dp": profile.max_running_requests,
        }
    else:  # 0.5.23 managers/scheduler_components/internal_state.py _add_topology, _add_memory_usage
        state = args | {
            "world_size": 1,
            "startup_time": startup_time,
            "effective_max_running_requests_per_dp": profile.max_running_requests,
            "last_gen_throughput": last_gen_throughput,
            "memory_usage": memory,
        }
    body = args | {
        "launch_command": _launch_command(profile, host, port),
        "status": "ready",
        "max_total_num_tokens": profile.max_total_num_tokens,
        "max_req_input_len": profile.max_req_input_len,
        "startup_time": startup_time,
        "kv_events": None,
        "internal_states": [state],
        "version": profile.reported_version,
    }
    if profile.sglang_version != "0.5.20":
        body["frontend"] = "python"
    return body


def model_info(profile: SimulatorProfile) -> dict[str, Any]:
    """``GET /model_info`` (SGLang ``entrypoints/http_server.py`` ``model_info``)."""
    body: dict[str, Any] = {
        "model_path": profile.model_path,
        "served_model_name": profile.served_model_name,
        "tokenizer_path": profile.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": profile.reasoning_parser,
        "tool_call_parser": profile.tool_call_parser,
    }
    if profile.sglang_version != "0.5.20":
        body["disaggregation_mode"] = "null"
    return body | {
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
    }


def v1_models(profile: SimulatorProfile, created: int) -> dict[str, Any]:
    """``GET /v1/models``; ``created`` in Unix seconds."""
    card = {
        "id": profile.served_model_name,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": profile.served_model_name,
        "parent": None,
        "max_model_len": profile.context_length,
    }
    return {"object": "list", "data": [card]}


def usage(
    profile: SimulatorProfile,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    reasoning_tokens: int,
    cached_tokens: int,
) -> dict[str, Any]:
    """``usage`` of a chat response, in tokens, as ``profile.sglang_version`` reports it."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    details = None
    if profile.enable_cache_report and (profile.sglang_version != "0.5.20" or cached_tokens > 0):
        details = {"cached_tokens": cached_tokens}
    body["prompt_tokens_details"] = details
    body["reasoning_tokens"] = reasoning_tokens
    if profile.sglang_version != "0.5.20":
        body["completion_tokens_details"] = (
            {"reasoning_tokens": reasoning_tokens} if reasoning_tokens else None
        )
    return body


def chat_response(
    profile: SimulatorProfile,
    *,
    rid: str,
    created: int,
    model: str | None,
    message: dict[str, Any],
    finish_reason: str,
    matched_stop: int | None,
    usage_body: dict[str, Any],
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` body. ``message`` has role, content,
    reasoning_content and (optionally) tool_calls."""
    message = dict(message)
    if message.get("tool_calls") is None:
        if profile.sglang_version == "0.5.20":
            message["tool_calls"] = None
        else:
            message.pop("tool_calls", None)
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason,
        "matched_stop": matched_stop,
    }
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model if model is not None else DEFAULT_MODEL_NAME,
        "choices": [choice],
        "usage": usage_body,
        "metadata": {"weight_version": "default"},
    }


@dataclass(frozen=True, slots=True)
class GaugeSnapshot:
    """The scheduler gauges as last logged (SGLang refreshes them only when it logs stats).

    Attributes:
        running / queued: requests running and waiting.
        running_by_priority / queued_by_priority: the same per request ``priority``.
        token_usage: KV-cache fraction in use, 0–1.
        gen_throughput: tokens/s over the server.
        cache_hit_rate: cached fraction of admitted prompt tokens, 0–1.
    """

    running: int = 0
    queued: int = 0
    running_by_priority: dict[int | None, int] = field(default_factory=dict)
    queued_by_priority: dict[int | None, int] = field(default_factory=dict)
    token_usage: float = 0.0
    gen_throughput: float = 0.0
    cache_hit_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class Counters:
    """The tokenizer's counters (counted when a request finishes; aborts when sent)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    aborted: int = 0


def _labels(labels: dict[str, str]) -> str:
    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(labels[k])}"' for k in sorted(labels)) + "}"


def _priority_label(priority: int | None) -> str:
    # SGLang gives a request without priority sys.maxsize or -sys.maxsize - 1 (managers/scheduler.py
    # _set_or_validate_priority, default: larger values first, so the lowest).
    return str(-(2**63) if priority is None else priority)


def metrics_text(
    profile: SimulatorProfile, gauges: GaugeSnapshot, counters: Counters, known_priorities: set[int | None]
) -> str:
    """``GET /metrics`` Prometheus text (the series in ``tests/fixtures/sglang/*/metrics*.txt``)."""
    sched = {"engine_type": "unified", "model_name": profile.served_model_name}
    sched |= {"moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    tok = {"engine_type": "unified", "model_name": profile.served_model_name}
    if profile.enable_priority_scheduling:
        sched["priority"] = tok["priority"] = ""
    lines: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[dict[str, str], float]]) -> None:
        base = name.removesuffix("_total") if kind == "counter" else name
        lines.extend([f"# HELP {base} {doc}", f"# TYPE {base} {kind}"])
        lines.extend(f"{name}{_labels(labels)} {float(value)!r}" for labels, value in samples)

    def queue_count(total: int, split: dict[int | None, int]) -> list[tuple[dict[str, str], float]]:
        samples: list[tuple[dict[str, str], float]] = [(sched, total)]
        if profile.enable_priority_scheduling:
            for priority in sorted(known_priorities, key=lambda p: -(2**63) if p is None else p):
                samples.append((sched | {"priority": _priority_label(priority)}, split.get(priority, 0)))
        return samples

    family("sglang:num_running_reqs", "gauge", "The number of running requests.",
           queue_count(gauges.running, gauges.running_by_priority))  # fmt: skip
    family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
           queue_count(gauges.queued, gauges.queued_by_priority))  # fmt: skip
    family(
        "sglang:gen_throughput",
        "gauge",
        "The generation throughput (token/s).",
        [(sched, gauges.gen_throughput)],
    )
    family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", [(sched, gauges.cache_hit_rate)])
    family("sglang:token_usage", "gauge", "The token usage.", [(sched, gauges.token_usage)])
    streaming = tok | {"is_streaming": "false"}
    family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           [(streaming, counters.prompt_tokens)])  # fmt: skip
    family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
           [(streaming, counters.generation_tokens)])  # fmt: skip
    if counters.cached_tokens > 0:  # a labelled child appears once incremented
        family("sglang:cached_tokens_total", "counter",
               "Number of cached prompt tokens by source (device/host/storage).",
               [(tok | {"cache_source": "device"}, counters.cached_tokens)])  # fmt: skip
    else:
        lines.extend([
            "# HELP sglang:cached_tokens Number of cached prompt tokens by source (device/host/storage).",
            "# TYPE sglang:cached_tokens counter",
        ])  # fmt: skip
    family(
        "sglang:num_requests_total",
        "counter",
        "Number of requests processed.",
        [(streaming, counters.requests)],
    )
    family(
        "sglang:num_aborted_requests_total",
        "counter",
        "Number of requests aborted.",
        [(tok, counters.aborted)],
    )
    return "\n".join(lines) + "\n"
