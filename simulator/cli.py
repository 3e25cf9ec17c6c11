"""The simulator's command line (``python -m simulator --port 30000 --time-scale 1 ...``):
argument parsing, the profile the arguments describe, and serving until a signal or a crash.

Runs one SGLang-API simulator until SIGINT/SIGTERM (exit status 0) or until a ``crash``
fault takes it down (exit status 1, as a crashed server process would).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace

from simulator.profile import DEFAULT_PROFILE, PERSONAS, SGLANG_VERSIONS, FaultConfig, SimulatorProfile
from simulator.server import SimulatedServer
from streams.errors import KafkagenError

__all__ = ["build_parser", "main", "profile_from_args", "serve"]


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser (defaults from :data:`DEFAULT_PROFILE`)."""
    d = DEFAULT_PROFILE
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="SGLang-API simulator: SGLang's HTTP API and batching behaviour with synthetic "
        "output (no model runs). Durations are simulated seconds; --time-scale N runs N times faster.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=30000, help="TCP port, 0: any free one (default %(default)s)"
    )
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--model-path", default=d.model_path)
    parser.add_argument("--served-model-name", default=None, help="default: the model path")
    parser.add_argument(
        "--persona",
        choices=PERSONAS,
        default="sglang",
        help="the server to pass for: SGLang, vLLM 0.11.0 (docs/vllm.md) or a generic "
        "OpenAI-compatible server with /v1/models and chat only (default %(default)s)",
    )
    parser.add_argument(
        "--sglang-version",
        choices=SGLANG_VERSIONS,
        default=d.sglang_version,
        help="the SGLang release whose answers to mirror (default %(default)s)",
    )
    parser.add_argument(
        "--max-running-requests",
        type=int,
        default=None,
        help=f"slots (default {d.max_running_requests}; in /server_info only when given, as SGLang)",
    )
    parser.add_argument(
        "--context-length",
        type=int,
        default=None,
        help=f"tokens (default {d.context_length}; reported in /server_info only when given)",
    )
    parser.add_argument(
        "--max-queued-requests",
        type=int,
        default=None,
        help="waiting requests beyond which SGLang answers 503 (default: unbounded, never 503)",
    )
    parser.add_argument(
        "--enable-cache-report",
        action=argparse.BooleanOptionalAction,
        default=d.enable_cache_report,
        help="report usage.prompt_tokens_details.cached_tokens (default on, as docker-compose.yml)",
    )
    parser.add_argument(
        "--enable-priority-scheduling",
        action="store_true",
        help="per-priority /metrics series, as SGLang's --enable-priority-scheduling",
    )
    parser.add_argument(
        "--decode-log-interval",
        type=int,
        default=d.decode_log_interval,
        help="decode steps between gauge refreshes",
    )
    parser.add_argument("--load-s", type=float, default=d.load_s, help="seconds before the socket listens")
    parser.add_argument("--max-total-num-tokens", type=int, default=d.max_total_num_tokens, help="KV tokens")
    parser.add_argument("--decode-tok-s-min", type=float, default=d.decode_tok_s_min, help="tok/s, batch 1")
    parser.add_argument("--decode-tok-s-max", type=float, default=d.decode_tok_s_max, help="tok/s, batch 1")
    parser.add_argument(
        "--batch-slowdown",
        type=float,
        default=d.batch_slowdown,
        help="alpha in rate(b) = r1 / (1 + alpha (b - 1)) (default %(default)s)",
    )
    parser.add_argument("--prefill-tok-s", type=float, default=d.prefill_tok_s, help="prompt tokens/s")
    parser.add_argument("--warmup-s", type=float, default=d.warmup_s, help="extra s, 1st request")
    parser.add_argument(
        "--startup-s",
        type=float,
        default=d.startup_s,
        help="warm-up seconds: /health answers 503, chat is served",
    )
    parser.add_argument("--reasoning-parser", default=d.reasoning_parser, help="'none' to disable")
    parser.add_argument("--tool-call-parser", default=d.tool_call_parser, help="'none' to disable")
    parser.add_argument(
        "--enable-thinking",
        action=argparse.BooleanOptionalAction,
        default=d.default_enable_thinking,
        help="default enable_thinking when a request does not say",
    )
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of the synthetic output")
    parser.add_argument(
        "--faults",
        default="{}",
        metavar="JSON",
        help="faults from the start, e.g. '{\"abort_rate\": 0.05}' (fields of FaultConfig; "
        "change them later with POST /simulator/faults)",
    )
    return parser


def _optional(value: str | None) -> str | None:
    return None if value is None or value.lower() == "none" else value


def profile_from_args(args: argparse.Namespace) -> SimulatorProfile:
    """The profile the parsed arguments describe."""
    return replace(
        DEFAULT_PROFILE,
        name="cli",
        model_path=args.model_path,
        served_model_name=args.served_model_name or args.model_path,
        sglang_version=args.sglang_version,
        persona=args.persona,
        max_running_requests=(
            DEFAULT_PROFILE.max_running_requests
            if args.max_running_requests is None
            else args.max_running_requests
        ),
        max_running_requests_set=args.max_running_requests is not None,
        context_length=DEFAULT_PROFILE.context_length if args.context_length is None else args.context_length,
        context_length_set=args.context_length is not None,
        max_queued_requests=args.max_queued_requests,
        enable_cache_report=args.enable_cache_report,
        enable_priority_scheduling=args.enable_priority_scheduling,
        decode_log_interval=args.decode_log_interval,
        load_s=args.load_s,
        max_total_num_tokens=args.max_total_num_tokens,
        decode_tok_s_min=args.decode_tok_s_min,
        decode_tok_s_max=args.decode_tok_s_max,
        batch_slowdown=args.batch_slowdown,
        prefill_tok_s=args.prefill_tok_s,
        warmup_s=args.warmup_s,
        startup_s=args.startup_s,
        reasoning_parser=_optional(args.reasoning_parser),
        tool_call_parser=_optional(args.tool_call_parser),
        default_enable_thinking=args.enable_thinking,
        seed=args.seed,
    )


async def serve(server: SimulatedServer) -> int:
    """Run ``server`` until a signal (returns 0) or a crash fault (returns 1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    await server.start()
    p = server.profile
    persona = {"sglang": f"SGLang {p.sglang_version}", "vllm": "vLLM 0.11.0"}.get(
        p.persona, "OpenAI-compatible"
    )
    print(
        f"simulator ({persona}, synthetic output) listening on {server.url} "
        f"[model {p.served_model_name}, max_running_requests {p.max_running_requests}, "
        f"context {p.context_length}, time_scale {server.time_scale:g}]",
        flush=True,
    )
    stopped = asyncio.ensure_future(stop.wait())
    crashed = asyncio.ensure_future(server.wait_crashed())
    await asyncio.wait({stopped, crashed}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    crashed.cancel()
    if server.crashed:
        print("simulator: crashed (injected crash fault); exiting with status 1", file=sys.stderr, flush=True)
    await server.stop()
    return 1 if server.crashed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        faults_json = json.loads(args.faults)
        if not isinstance(faults_json, dict):
            parser.error("--faults must be a JSON object")
        server = SimulatedServer(
            profile_from_args(args),
            faults=FaultConfig.from_mapping(faults_json),
            time_scale=args.time_scale,
            host=args.host,
            port=args.port,
        )
        return asyncio.run(serve(server))
    except json.JSONDecodeError as exc:
        parser.error(f"--faults is not valid JSON: {exc}")
    except KafkagenError as exc:
        print(f"simulator: {exc}", file=sys.stderr)
        return 2
