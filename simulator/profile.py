"""Frozen configuration of the simulator: the server profile and the injected faults.

Every duration here is in *simulated* seconds: the server divides it by its ``time_scale``
to get wall-clock seconds (``time_scale=100`` runs everything 100 times faster).
Rates are tokens per simulated second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from streams.errors import ConfigError

__all__ = [
    "DEFAULT_PROFILE",
    "PERSONAS",
    "SGLANG_VERSIONS",
    "VLLM_VERSION",
    "FaultConfig",
    "SimulatorProfile",
]

SGLANG_VERSIONS = ("0.5.20", "0.5.23")
"""SGLang releases the simulator can mirror (``SimulatorProfile.sglang_version``)."""

PERSONAS = ("sglang", "vllm", "openai")
"""The servers the simulator can pass for (``SimulatorProfile.persona``): SGLang, vLLM
(:data:`VLLM_VERSION`, docs/vllm.md) or a generic OpenAI-compatible server (``/v1/models`` and
``/v1/chat/completions`` only)."""

VLLM_VERSION = "0.11.0"
"""The vLLM release the ``vllm`` persona mirrors (``/version``)."""


@dataclass(frozen=True, slots=True)
class SimulatorProfile:
    """What the simulated SGLang server is: model facts, engine limits and speed.

    The defaults describe the real job's server: a Qwen3-family model on one B200.

    Measured (from the brief): 234–256 tokens/s per request at concurrency 1 on a B200,
    ``max_running_requests`` 16. Set from the deployment: context length 32768,
    ``reasoning_parser`` "qwen3". Everything else is an assumption, chosen to look
    plausible, not measured:

    * ``model_path`` "Qwen/Qwen3-8B": the brief names only the family; change it freely.
    * ``batch_slowdown`` 0.05: how much the per-request decode rate falls per extra running
      request (see :meth:`per_request_rate`); at 16 running requests each decodes at
      ~140 tokens/s and the server at ~2,240 tokens/s.
    * ``prefill_tok_s`` 30,000, ``warmup_s`` 5, ``max_total_num_tokens`` 1,000,000
      (KV-cache capacity; never limits admission in this simulator).
    * Output lengths: lognormal with median 1,800 tokens with thinking on (60–90 % of
      them reasoning) and 300 with thinking off, sigma 0.6.

    Attributes:
        name: a label for logs and ``/server_info``.
        model_path: reported by ``/model_info`` and ``/server_info``.
        served_model_name: reported by ``/model_info`` and ``/v1/models``.
        reasoning_parser: SGLang's ``--reasoning-parser``; ``None`` disables the reasoning split.
        tool_call_parser: SGLang's ``--tool-call-parser``; ``None`` disables tool calls.
        version: ``/server_info`` ``version`` override; ``None`` (default) reports
            ``sglang_version``, as SGLang reports its own ``__version__`` there. The simulator
            marks itself with the ``X-Simulator`` response header, never inside SGLang's fields.
        sglang_version: the SGLang release whose answers the simulator mirrors, one of
            :data:`SGLANG_VERSIONS` ("0.5.20", the version ``docker-compose.yml`` pins, or
            "0.5.23"); see :mod:`simulator.shapes` for what differs.
        persona: the server the simulator passes for, one of :data:`PERSONAS`: "sglang"
            (default), "vllm" (vLLM 0.11.0's endpoints, shapes and errors; docs/vllm.md) or
            "openai" (a generic server: ``/v1/models`` and chat only; :mod:`simulator.routes.personas`).
        max_running_requests_set: whether ``--max-running-requests`` was given on the command
            line; SGLang's ``/server_info`` top-level ``max_running_requests`` is null otherwise
            (the limit in use is ``internal_states[i].effective_max_running_requests_per_dp``).
        context_length_set: whether ``--context-length`` was given; ``/server_info``
            ``context_length`` is null otherwise (``/v1/models`` ``max_model_len`` carries it).
        max_queued_requests: SGLang's ``--max-queued-requests``: a request arriving while this
            many wait answers 503 "The request queue is full." ``None`` (SGLang's default): the
            queue is unbounded and load never causes a 503.
        enable_cache_report: SGLang's ``--enable-cache-report`` (on in ``docker-compose.yml``):
            ``usage.prompt_tokens_details.cached_tokens`` is reported.
        enable_deterministic_inference: SGLang's ``--enable-deterministic-inference``: every
            request samples with its ``seed`` (42 when it sends none; SGLang 0.5.23
            ``sampling/sampling_batch_info.py``), so the ``n`` copies of a request are equal.
        enable_priority_scheduling: SGLang's ``--enable-priority-scheduling``: every metric
            series gets a ``priority`` label ("" for the total) and the running/queued gauges
            add one series per request ``priority`` seen.
        decode_log_interval: SGLang's ``--decode-log-interval`` (40): the scheduler gauges in
            ``/metrics`` and ``last_gen_throughput`` refresh on each prefill batch and every
            this many decode steps, not continuously.
        load_s: seconds between :meth:`SimulatedServer.start` and the socket listening (model
            loading): connections are refused meanwhile, as SGLang's are.
        max_running_requests: slots: requests decoding at once; the rest wait in a FIFO.
        context_length: tokens; prompt plus ``max_tokens`` must stay below it.
        max_total_num_tokens: KV-cache capacity in tokens (reported, and used for ``token_usage``).
        decode_tok_s_min: tokens/s at batch size 1, lower end (each request draws its own
            batch-1 rate uniformly from [min, max], deterministically per request).
        decode_tok_s_max: tokens/s at batch size 1, upper end.
        batch_slowdown: ``alpha`` in ``rate(b) = r1 / (1 + alpha * (b - 1))``.
        prefill_tok_s: prompt tokens processed per second before a request's first output token.
        warmup_s: extra seconds added to the first request admitted after (re)start.
        startup_s: seconds after listening during which ``/health`` and ``/health_generate``
            answer 503 (SGLang's ``ServerStatus.Starting``, the warm-up); chat requests are
            accepted meanwhile, as SGLang accepts them.
        default_enable_thinking: ``enable_thinking`` when a request does not say (the
            server's ``--default-chat-template-kwargs``).
        thinking_median_tokens: median output length in tokens with thinking on.
        no_thinking_median_tokens: median output length in tokens with thinking off.
        length_sigma: sigma of the lognormal output length (log-space standard deviation).
        reasoning_share_min: smallest fraction of a thinking output that is reasoning.
        reasoning_share_max: largest fraction of a thinking output that is reasoning.
        tool_call_fraction: fraction (0–1) of answers that are tool calls when tools are
            offered and ``tool_choice`` is ``"auto"``; deterministic per request.
        health_check_timeout_s: ``/health_generate`` answers 503 when no token is produced
            within this many seconds (SGLang's ``SGLANG_HEALTH_CHECK_TIMEOUT``, 20 s).
        disconnect_poll_s: how often a waiting request checks for a client disconnect
            (SGLang polls every ~4 s); a disconnected request is aborted and frees its slot.
        seed: mixed into every per-request seed; change it for a different synthetic corpus.
    """

    name: str = "qwen3-b200"
    model_path: str = "Qwen/Qwen3-8B"
    served_model_name: str = "Qwen/Qwen3-8B"
    reasoning_parser: str | None = "qwen3"
    tool_call_parser: str | None = "qwen25"
    version: str | None = None
    max_running_requests: int = 16
    context_length: int = 32768
    max_total_num_tokens: int = 1_000_000
    decode_tok_s_min: float = 234.0
    decode_tok_s_max: float = 256.0
    batch_slowdown: float = 0.05
    prefill_tok_s: float = 30_000.0
    warmup_s: float = 5.0
    startup_s: float = 0.0
    default_enable_thinking: bool = True
    thinking_median_tokens: float = 1800.0
    no_thinking_median_tokens: float = 300.0
    length_sigma: float = 0.6
    reasoning_share_min: float = 0.6
    reasoning_share_max: float = 0.9
    tool_call_fraction: float = 0.5
    health_check_timeout_s: float = 20.0
    disconnect_poll_s: float = 4.0
    seed: int = 0
    sglang_version: str = "0.5.20"
    max_running_requests_set: bool = False
    context_length_set: bool = False
    max_queued_requests: int | None = None
    enable_cache_report: bool = True
    enable_priority_scheduling: bool = False
    enable_deterministic_inference: bool = False
    decode_log_interval: int = 40
    load_s: float = 0.0
    persona: str = "sglang"

    def __post_init__(self) -> None:
        if self.persona not in PERSONAS:
            raise ConfigError(f"persona must be one of {PERSONAS}, got {self.persona!r}")
        if self.sglang_version not in SGLANG_VERSIONS:
            raise ConfigError(f"sglang_version must be one of {SGLANG_VERSIONS}, got {self.sglang_version!r}")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            raise ConfigError(f"max_queued_requests must be >= 0 or None, got {self.max_queued_requests}")
        if self.decode_log_interval < 1:
            raise ConfigError(f"decode_log_interval must be >= 1, got {self.decode_log_interval}")
        if self.max_running_requests < 1:
            raise ConfigError(f"max_running_requests must be >= 1, got {self.max_running_requests}")
        if self.context_length < 2:
            raise ConfigError(f"context_length must be >= 2 tokens, got {self.context_length}")
        if self.max_total_num_tokens < 2:
            raise ConfigError(f"max_total_num_tokens must be >= 2, got {self.max_total_num_tokens}")
        if not 0 < self.decode_tok_s_min <= self.decode_tok_s_max:
            raise ConfigError(
                "need 0 < decode_tok_s_min <= decode_tok_s_max, "
                f"got {self.decode_tok_s_min} and {self.decode_tok_s_max}"
            )
        if self.batch_slowdown < 0:
            raise ConfigError(f"batch_slowdown must be >= 0, got {self.batch_slowdown}")
        if self.prefill_tok_s <= 0:
            raise ConfigError(f"prefill_tok_s must be > 0, got {self.prefill_tok_s}")
        for name in ("warmup_s", "startup_s", "length_sigma", "load_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("thinking_median_tokens", "no_thinking_median_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1 token, got {getattr(self, name)}")
        if not 0 <= self.reasoning_share_min <= self.reasoning_share_max <= 1:
            raise ConfigError(
                "need 0 <= reasoning_share_min <= reasoning_share_max <= 1, "
                f"got {self.reasoning_share_min} and {self.reasoning_share_max}"
            )
        if not 0 <= self.tool_call_fraction <= 1:
            raise ConfigError(f"tool_call_fraction must be in [0, 1], got {self.tool_call_fraction}")
        for name in ("health_check_timeout_s", "disconnect_poll_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")

    @property
    def reported_version(self) -> str:
        """``/server_info`` ``version``: ``version`` when set, else ``sglang_version``."""
        return self.version if self.version is not None else self.sglang_version

    @property
    def max_req_input_len(self) -> int:
        """Longest accepted prompt in tokens (SGLang: ``min(context_len, max_total_num_tokens) - 1``)."""
        return min(self.context_length, self.max_total_num_tokens) - 1

    def per_request_rate(self, batch_size: int, base_rate: float | None = None) -> float:
        """Decode rate of one request in tokens/s while ``batch_size`` requests hold slots.

        ``rate(b) = r1 / (1 + alpha * (b - 1))`` with ``r1`` the request's batch-1 rate
        (``base_rate``; default: the middle of [decode_tok_s_min, decode_tok_s_max]) and
        ``alpha = batch_slowdown``. Total throughput ``b * rate(b)`` rises with ``b`` but
        sublinearly, towards ``r1 / alpha``.
        """
        r1 = (self.decode_tok_s_min + self.decode_tok_s_max) / 2 if base_rate is None else base_rate
        return r1 / (1.0 + self.batch_slowdown * (max(batch_size, 1) - 1))

    def total_throughput(self, batch_size: int) -> float:
        """Server decode throughput in tokens/s with ``batch_size`` decoding requests."""
        return batch_size * self.per_request_rate(batch_size) if batch_size > 0 else 0.0


DEFAULT_PROFILE = SimulatorProfile()
"""Qwen3-family model on one B200 (see :class:`SimulatorProfile` for what is measured)."""


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Faults to inject. The default injects none.

    Set at start (``SimulatedServer(faults=...)``, CLI ``--faults JSON``) or at run time
    (``SimulatedServer.set_faults(...)``, ``POST /simulator/faults``). Setting a field at
    run time re-arms it from that moment (a new 503 burst, a new crash timer).

    Attributes:
        error_503_count: the next N generation requests answer 503 (an injected fault: SGLang
            itself answers 503 for load only with ``--max-queued-requests``, see
            ``SimulatorProfile.max_queued_requests``).
        error_503_for_s: every generation request answers 503 for this many seconds.
        crash_after_s: the server crashes this many seconds after the fault is set (0: at
            once). A crash closes the listening socket and drops every open connection
            without a response; in-flight requests are lost. The CLI then exits with
            status 1; in process, :meth:`SimulatedServer.restart` brings it back. A crash
            is one-shot: both crash fields reset to ``None`` when it happens.
        crash_after_requests: the server crashes when a generation request arrives after N
            more were accepted (0: the next request crashes it).
        hang: the engine stops producing tokens: requests are accepted but never complete,
            ``/health`` and ``/health_generate`` answer 503 after their timeout (SGLang's
            ``/health`` generates too) and ``/server_info`` waits (it asks the scheduler).
            Clearing it resumes the engine where it stopped.
        slow_factor: every decode step takes this many times longer (1: normal speed).
        degenerate_thinking_off: the model ignores ``enable_thinking`` and answers "OK."
            with no reasoning (the incident this project was built after).
        reasoning_eats_budget: the whole ``max_tokens`` budget goes to reasoning:
            ``content`` is "", ``finish_reason`` is "length".
        abort_rate: fraction (0–1) of generation requests that end with
            ``finish_reason: "abort"`` part way through. Drawn per request from the
            server's RNG, not from the request id, so a retry may succeed.
        repetition: the answer is one short n-gram repeated until the token budget runs out
            (``finish_reason: "length"``).
        draining: the server is shutting down: ``/health``, ``/health_generate`` and new
            generation requests answer 503 while in-flight requests finish.
        abort_status: with ``abort_rate``, the HTTP status (400, 500 or 503) an aborted request
            answers with instead of 200 and ``finish_reason: "abort"``: SGLang raises a
            non-streaming abort that carries a status code, 400 as a ``ValueError`` (error type
            "BadRequest"), 500/503 as an ``HTTPException`` (type "500"/"503"); SGLang 0.5.20
            ``managers/tokenizer_manager.py`` ``_handle_abort_finish_reason``,
            ``entrypoints/openai/serving_base.py`` ``handle_request``.
        reasoning_parse_error_rate: fraction (0–1) of answers that fail the reasoning parser
            after the generation ran: 500, "Failed to parse reasoning content", type
            "InternalServerError" (SGLang 0.5.20 ``entrypoints/openai/serving_chat.py``
            ``_build_chat_response``). Only with a reasoning parser. Drawn from the server's RNG.
        omit_usage: answers carry no ``usage`` object (as some OpenAI-compatible proxies send).
    """

    error_503_count: int = 0
    error_503_for_s: float = 0.0
    crash_after_s: float | None = None
    crash_after_requests: int | None = None
    hang: bool = False
    slow_factor: float = 1.0
    degenerate_thinking_off: bool = False
    reasoning_eats_budget: bool = False
    abort_rate: float = 0.0
    repetition: bool = False
    draining: bool = False
    abort_status: int | None = None
    reasoning_parse_error_rate: float = 0.0
    omit_usage: bool = False
    structured_violation_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("error_503_count", "error_503_for_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"fault {name} must be >= 0, got {getattr(self, name)}")
        for name in ("crash_after_s", "crash_after_requests"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"fault {name} must be >= 0 or null, got {value}")
        if not (self.slow_factor > 0 and math.isfinite(self.slow_factor)):
            raise ConfigError(f"fault slow_factor must be a finite number > 0, got {self.slow_factor}")
        for name in ("abort_rate", "reasoning_parse_error_rate", "structured_violation_rate"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"fault {name} must be in [0, 1], got {getattr(self, name)}")
        if self.abort_status not in (None, 400, 500, 503):
            raise ConfigError(f"fault abort_status must be 400, 500, 503 or null, got {self.abort_status}")

    @classmethod
    def from_mapping(cls, changes: Mapping[str, Any], base: FaultConfig | None = None) -> FaultConfig:
        """``base`` (default: no faults) with the fields in ``changes`` replaced.

        Values are checked strictly (JSON-style: booleans for flags, numbers for counts
        and seconds, ``None`` where allowed).

        Raises:
            ConfigError: an unknown field or a value of the wrong type or range.
        """
        known = {f.name: str(f.type) for f in fields(cls)}
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise ConfigError(f"unknown fault field(s) {unknown}; known: {sorted(known)}")
        checked: dict[str, Any] = {}
        for name, value in changes.items():
            kind = known[name]
            optional = kind.endswith("| None")
            if value is None and optional:
                checked[name] = None
            elif kind.startswith("bool"):
                if not isinstance(value, bool):
                    raise ConfigError(f"fault {name} must be true or false, got {value!r}")
                checked[name] = value
            elif kind.startswith("int"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"fault {name} must be an integer, got {value!r}")
                checked[name] = value
            else:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(f"fault {name} must be a number, got {value!r}")
                checked[name] = float(value)
        return replace(base if base is not None else cls(), **checked)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)
