"""The probe: one chat completion per server with the run's generation parameters, before a run.

The run this project replaces started with thinking off on a model meant to think, and its
first test request showed every one of 512 tokens spent on reasoning with an empty answer. The
probe sends one real prompt (a GSM8K question: a short, reasoning-shaped task) to every server
with exactly the generation settings the run will use, then judges the answer with the
consumer's own quality flags (:func:`consumers.quality.quality_flags`), so the probe and the
run can never disagree on what "degenerate" means:

* ``reasoning_ate_budget`` / ``empty_content``: the budget ran out inside the reasoning, or the
  answer is empty → raise ``--max-tokens`` (with thinking off: the model ignores
  ``enable_thinking=false``, and the message says so);
* ``thinking_missing``: thinking was asked for but no ``reasoning_content`` came back → start
  the server with its ``--reasoning-parser`` (the trace stays inside ``content`` without one),
  or run with ``--no-thinking`` for a model without a thinking mode;
* an HTTP error or no answer → the server's own message.

The first request after a server starts can take minutes (SGLang captures CUDA graphs and warms
up on it), so each probe waits up to ``timeout_s`` seconds. ``kafkagen serve up``, ``kafkagen
serve probe`` and ``kafkagen run`` run it; ``--no-probe`` skips it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from consumers.client import ServerClient, request_id
from consumers.quality import QualityFlag, answer_flags
from consumers.requests import thinking_requested
from streams.config import GenerationSettings
from streams.errors import ConfigError, KafkagenError, UnavailableError
from streams.records import PromptMetadata, PromptRecord

__all__ = [
    "PROBE_PROMPT",
    "PROBE_TIMEOUT_S",
    "ProbeError",
    "ProbeResult",
    "check_probes",
    "probe",
    "probe_servers",
]

PROBE_PROMPT = PromptRecord(
    id="kafkagen-probe",
    messages=[
        {
            "role": "user",
            "content": "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning "
            "and bakes muffins for her friends every day with four. She sells the remainder at the "
            "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make every "
            "day at the farmers' market?",
        }
    ],
    metadata=PromptMetadata(
        source="kafkagen probe (GSM8K test, first question; MIT, data/README.md)", line=1
    ),
)
"""The probe's prompt: the first question of GSM8K's test split (``data/gsm8k/``)."""


PROBE_TIMEOUT_S = 600.0
"""Seconds one server may take to answer the probe by default: its first request after start-up
can take minutes (CUDA graph capture)."""


class ProbeError(ConfigError):
    """The servers answer, but with the run's generation settings their output is unusable (or a
    server did not answer the probe). The message has one line per failing server, each with the
    fix. Exit status 2: the settings (or the server's flags) have to change."""


@dataclass(frozen=True)
class ProbeResult:
    """One server's answer to the probe.

    Attributes:
        name: how the user knows the server (``gpu-3``, or its URL).
        url: the server's base URL.
        max_tokens: the budget the probe asked for (tokens).
        thinking: whether the probe asked for thinking.
        finish_reason: the answer's, or None when there was no answer.
        completion_tokens: reasoning + answer tokens of the answer.
        reasoning_tokens: tokens of the reasoning, as the server counted them (0 when it does not).
        content_chars: characters of ``content``.
        reasoning: whether ``reasoning_content`` came back non-empty.
        flags: the consumer's quality flags for the answer.
        latency_s: seconds the chat completion took.
        problem: why the server fails the probe, with the fix; None when it passes.
    """

    name: str
    url: str
    max_tokens: int
    thinking: bool
    finish_reason: str | None = None
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    content_chars: int = 0
    reasoning: bool = False
    flags: tuple[str, ...] = ()
    latency_s: float = 0.0
    problem: str | None = None

    def line(self) -> str:
        """One line for the terminal: what the server answered, and the problem if any."""
        if self.finish_reason is None:
            return f"{self.name}: no answer: {self.problem}"
        answer = (
            f"{self.name}: finish_reason {self.finish_reason}, {self.completion_tokens}/{self.max_tokens} "
            f"tokens (reasoning {self.reasoning_tokens}), content {self.content_chars} chars, "
            f"reasoning_content {'yes' if self.reasoning else 'no'} (thinking "
            f"{'on' if self.thinking else 'off'}), {self.latency_s:.1f} s"
        )
        return f"{answer}\n  FAIL: {self.problem}" if self.problem else f"{answer}: ok"


def _problem(name: str, result: ProbeResult) -> str | None:
    flags = set(result.flags)
    budget = result.max_tokens
    if QualityFlag.REASONING_ATE_BUDGET in flags and not result.thinking:
        return (
            f"thinking is off but {name} still reasoned until all {budget} tokens were gone (finish_reason "
            "length, content empty): the model or its chat template ignores enable_thinking=false; "
            f"raise --max-tokens (e.g. --max-tokens {max(4 * budget, 4096)}) to leave room for the answer, "
            "or serve a model (or --chat-template) that honours it"
        )
    if QualityFlag.REASONING_ATE_BUDGET in flags:
        return (
            f"all {budget} tokens went to reasoning on {name} (finish_reason length, content empty): "
            f"raise --max-tokens (e.g. --max-tokens {max(4 * budget, 4096)}), or turn thinking off "
            "with --no-thinking"
        )
    if QualityFlag.EMPTY_CONTENT in flags:
        return (
            f"{name} answered with empty content (finish_reason {result.finish_reason}, "
            f"{result.completion_tokens} tokens): check the model and its chat template"
        )
    if QualityFlag.THINKING_MISSING in flags:
        return (
            f"thinking is on but {name} sent no reasoning_content: start the server with the model's "
            "--reasoning-parser (e.g. qwen3 for Qwen3, deepseek-r1 for DeepSeek-R1; without one the "
            "trace stays inside content), or run with --no-thinking if the model has no thinking mode"
        )
    return None


async def _probe_one(
    name: str, url: str, generation: GenerationSettings, prompt: PromptRecord, timeout_s: float
) -> ProbeResult:
    client = ServerClient(url, generation, pool_size=1, request_timeout_s=timeout_s)
    thinking = bool(generation.chat_template_kwargs.get("enable_thinking"))
    base = ProbeResult(name=name, url=url, max_tokens=generation.max_tokens, thinking=thinking)
    try:
        await client.describe(wait_s=min(timeout_s, 30.0))
        body = client.request_body(prompt, request_id("kafkagen-probe", prompt.id, 0, 1))
        answer = await client.chat(body)
    except KafkagenError as exc:
        text = str(exc)
        return dataclasses.replace(base, problem=text if text.startswith(url) else f"{url}: {text}")
    finally:
        await client.aclose()
    flags = answer_flags(prompt, body, answer)
    result = ProbeResult(
        name=name,
        url=url,
        max_tokens=int(body.get("max_tokens", generation.max_tokens)),
        thinking=thinking_requested(body),
        finish_reason=answer.finish_reason,
        completion_tokens=answer.usage.completion_tokens,
        reasoning_tokens=answer.usage.reasoning_tokens,
        content_chars=len(answer.content),
        reasoning=bool(answer.reasoning_content and answer.reasoning_content.strip()),
        flags=tuple(flags),
        latency_s=answer.latency_s,
    )
    return dataclasses.replace(result, problem=_problem(name, result))


def probe_servers(
    servers: Mapping[str, str] | Sequence[str],
    generation: GenerationSettings,
    *,
    prompt: PromptRecord = PROBE_PROMPT,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> list[ProbeResult]:
    """Send ``prompt`` to every server at once with ``generation``'s parameters and judge each answer.

    Args:
        servers: name → base URL (e.g. ``{"gpu-0": "http://127.0.0.1:30000"}``), or URLs (named by
            themselves).
        generation: the run's generation settings (``max_tokens`` in tokens, thinking in
            ``chat_template_kwargs.enable_thinking``), exactly as the consumers will send them.
        prompt: the probe's prompt (default :data:`PROBE_PROMPT`).
        timeout_s: seconds one server may take to answer (its first request after start-up can
            take minutes: CUDA graph capture).

    Returns:
        One :class:`ProbeResult` per server, in the given order; a server that did not answer has
        ``finish_reason`` None and its error in ``problem``. Never raises for a server's answer:
        :func:`check_probes` turns failures into an error.
    """
    named = dict(servers) if isinstance(servers, Mapping) else {url: url for url in servers}

    async def run_all() -> list[ProbeResult]:
        return list(
            await asyncio.gather(
                *(_probe_one(name, url, generation, prompt, timeout_s) for name, url in named.items())
            )
        )

    return asyncio.run(run_all())


def check_probes(
    results: Sequence[ProbeResult], *, skip_hint: str | None = "--no-probe skips this check"
) -> None:
    """Raise when any server failed the probe; ``skip_hint`` (how to go on without the check) ends
    the message, when the command has one.

    Raises:
        UnavailableError: every failing server failed to answer at all (exit status 3).
        ProbeError: one line per failing server, each naming the server and the fix; the last line
            says how to skip the check (``--no-probe``).
    """
    failed = [r for r in results if r.problem]
    if failed and all(r.finish_reason is None for r in failed):
        raise UnavailableError(
            "\n".join(
                [f"{len(failed)} of {len(results)} server(s) did not answer the probe:"]
                + [f"  {r.problem}" if r.name == r.url else f"  {r.name}: {r.problem}" for r in failed]
            )
        )
    if failed:
        lines = [f"{len(failed)} of {len(results)} server(s) failed the probe:"]
        lines += [f"  {r.problem}" for r in failed]
        lines.append("fix the settings above and start again" + (f" ({skip_hint})" if skip_hint else ""))
        raise ProbeError("\n".join(lines))


def probe(
    servers: Mapping[str, str] | Sequence[str],
    generation: GenerationSettings,
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
    echo: Callable[[str], None] = print,
    skip_hint: str | None = "--no-probe skips this check",
) -> list[ProbeResult]:
    """:func:`probe_servers`, a line per server through ``echo``, then :func:`check_probes`
    (``skip_hint``: how the command goes on without the probe, None when it cannot).

    Raises:
        ProbeError: a server's answer is unusable with ``generation`` (the fix in the message).
        UnavailableError: the failing servers did not answer at all.
    """
    thinking = generation.chat_template_kwargs.get("enable_thinking")
    echo(f"probe: one chat completion per server, max_tokens {generation.max_tokens}, thinking {thinking}")
    results = probe_servers(servers, generation, timeout_s=timeout_s)
    for result in results:
        echo(result.line())
    check_probes(results, skip_hint=skip_hint)
    return results
