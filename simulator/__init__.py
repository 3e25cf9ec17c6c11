"""An SGLang-API **simulator**: a stand-in for an SGLang server, for benchmarks, fault
tests and dry runs. It runs no model: its output is synthetic text.

What it simulates
-----------------
* SGLang's HTTP API (``/health``, ``/health_generate``, ``/server_info``, ``/model_info``,
  ``/metrics``, non-streaming ``/v1/chat/completions``, ``/abort_request``) with SGLang's
  response shapes per SGLang version (``sglang_version``: 0.5.20 or 0.5.23; see :mod:`.shapes`),
  errors (400 for a too-long prompt or a duplicate in-flight ``rid``, 503 only with
  ``max_queued_requests``; ``/health`` generates like ``/health_generate``,
  503 while warming up) and reasoning split (``reasoning_content``, ``usage.reasoning_tokens``).
* With ``SimulatorProfile.persona`` "vllm": vLLM 0.11.0's API instead (``/health``, ``/version``,
  ``/v1/models``, ``/metrics`` with ``vllm:*`` gauges, chat with ``request_id``, vLLM's answers
  and ``ErrorResponse``; docs/vllm.md); "openai": a generic OpenAI-compatible server
  (``/v1/models`` and chat only). See :mod:`.routes.personas`.
* Continuous batching: ``max_running_requests`` slots, an unbounded FIFO waiting queue,
  per-request decode rate ``rate(b) = r1 / (1 + alpha * (b - 1))`` tokens/s with ``b``
  requests in slots, prefill time ``prompt_tokens / prefill_tok_s``, a slow first request
  (warm-up), client disconnects that abort the request. See :mod:`.engine`.
* Deterministic synthetic output per ``rid`` (or per messages without one): lognormal
  lengths, a reasoning part and an answer part, tool calls, ``max_tokens`` cut-offs. See
  :mod:`.output`. The words mean nothing; one word stands for one token.
* Faults, set at start or flipped at run time: 503 bursts, crash, hang, slow decode,
  degenerate "OK." answers, reasoning that eats the budget, aborts, repetition loops,
  draining. See :class:`FaultConfig`.

The default :class:`SimulatorProfile` is calibrated to the real job (a Qwen3-family model
on one B200, 234–256 tokens/s per request at concurrency 1, 16 running requests); its
docstring says which numbers are measured and which are assumptions.

Time
----
All durations (decode, prefill, warm-up, startup, fault windows, health timeout) are in
simulated seconds; ``time_scale`` simulated seconds pass per wall-clock second. Rates in
``/metrics``, ``/server_info`` and :class:`SimulatorStats` are per simulated second, as the
real server would report them; a client measuring wall-clock throughput sees them
multiplied by ``time_scale``.

Use
---
From the command line::

    python -m simulator --port 30000 --time-scale 1 --max-running-requests 16
    python -m simulator --persona vllm --port 8000    # passes for vLLM 0.11.0

In process (tests, benchmarks)::

    async with SimulatedServer(DEFAULT_PROFILE, time_scale=100, port=0) as server:
        ...  # talk to server.url
        server.set_faults(hang=True)
        print(server.stats().occupancy)

At run time over HTTP: ``POST /simulator/faults`` with a JSON object of
:class:`FaultConfig` fields (e.g. ``{"error_503_count": 5}``), ``DELETE /simulator/faults``
to clear, ``GET /simulator/faults`` and ``GET /simulator/stats`` to read.
"""

from __future__ import annotations

from simulator.engine import SimulatorStats
from simulator.output import OutputPlan, estimate_prompt_tokens, plan_output, request_seed
from simulator.profile import DEFAULT_PROFILE, FaultConfig, SimulatorProfile
from simulator.server import SimulatedServer

__all__ = [
    "DEFAULT_PROFILE",
    "FaultConfig",
    "OutputPlan",
    "SimulatedServer",
    "SimulatorProfile",
    "SimulatorStats",
    "estimate_prompt_tokens",
    "plan_output",
    "request_seed",
]
