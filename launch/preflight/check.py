"""The preflight: a sample of the run's input sent to every server with the run's generation
settings, measured and judged by the quality gate, before anything is published.

Each server gets the sample at once, within its slots, every request with a sampling seed drawn
from the preflight's (:func:`request_seed`), so the same input, settings and servers give the same
requests; a server that does not answer is :class:`UnavailableError` (exit 3). A class whose rate
is above its share at :data:`launch.preflight.verdict.CONFIDENCE` refuses the run with
:class:`PreflightError` (exit 2) with the fix, and a recommended ``--max-tokens`` where answers were
cut off; a sample too small to tell says so and refuses nothing. ``kafkagen preflight``
(:mod:`launch.preflight.cli`) runs it alone; ``kafkagen run``, ``kafkagen serve up`` and ``kafkagen
serve probe`` run it first. The steps and why: docs/main-job.md, "The preflight".
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from consumers.quality.flags import answer_flags
from consumers.servers import ServerClient, ServerInfo, request_id
from launch.preflight.options import DEFAULT_SEED, PREFLIGHT_TIMEOUT_S
from launch.preflight.sample import Sample
from launch.preflight.stats import (
    Recommendation,
    SampleAnswer,
    Summary,
    recommend,
    refusal,
    retry_budget,
    summarize,
)
from launch.preflight.verdict import Verdict, judge
from streams.config import GateSettings, GenerationSettings
from streams.control import Breach
from streams.errors import KafkagenError, PreflightError, ServerError, UnavailableError
from streams.records import PromptRecord

__all__ = [
    "DEFAULT_SLOTS",
    "PREFLIGHT_TIMEOUT_S",
    "PreflightReport",
    "ServerPreflight",
    "check_preflight",
    "preflight",
    "preflight_body",
    "request_seed",
    "run_preflight",
]

DEFAULT_SLOTS: Final = 8
"""Requests at once to a server that does not say how many it runs."""


@dataclass(frozen=True)
class ServerPreflight:
    """One server's preflight.

    Attributes:
        name: how the user knows the server (``gpu-3``, or its URL).
        url: its base URL.
        info: what discovery found; None when the server did not answer.
        answers: one per sample prompt, in the sample's order.
        problem: why the server could not be judged (it did not answer), else None.
        verdict: its answers judged against the gate's thresholds; None when it did not answer.
    """

    name: str
    url: str
    info: ServerInfo | None = None
    answers: tuple[SampleAnswer, ...] = ()
    problem: str | None = None
    verdict: Verdict | None = None

    @property
    def breaches(self) -> list[Breach]:
        """The gate's classes its answers are over (empty: not refused)."""
        return self.verdict.breaches() if self.verdict is not None else []

    @property
    def label(self) -> str:
        """``gpu-0 (http://...)``, or the URL alone when it is the name."""
        return self.url if self.name == self.url else f"{self.name} ({self.url})"


@dataclass(frozen=True)
class PreflightReport:
    """The whole preflight: the sample, the settings it was sent with, each server's answers.

    ``max_tokens`` (tokens) and ``thinking`` are the run's generation settings; ``sample`` where
    the prompts come from. :meth:`summary` and :meth:`recommendation` pool every server's answers.
    """

    max_tokens: int
    thinking: bool
    sample: Sample
    servers: tuple[ServerPreflight, ...]
    thresholds: dict[str, float] = field(default_factory=dict)

    def answers(self) -> list[SampleAnswer]:
        """Every server's answers."""
        return [a for s in self.servers for a in s.answers]

    def summary(self) -> Summary:
        """Every server's answers together."""
        return summarize(self.answers(), self.max_tokens)

    def recommendation(self) -> Recommendation:
        """The ``max_tokens`` every server's answers call for."""
        return recommend(self.answers())

    @property
    def unreachable(self) -> list[ServerPreflight]:
        """Servers that did not answer."""
        return [s for s in self.servers if s.problem]

    @property
    def failed(self) -> list[ServerPreflight]:
        """Servers whose answers trip the gate."""
        return [s for s in self.servers if s.breaches]

    @property
    def undecided(self) -> list[ServerPreflight]:
        """Servers whose sample is too small to tell (refused by no class, not within every one)."""
        return [s for s in self.servers if s.verdict is not None and s.verdict.state == "undecided"]

    @property
    def passed(self) -> bool:
        """Every server answered and none is refused (an undecided one passes: the run's gate
        judges it)."""
        return not self.unreachable and not self.failed

    def params(self) -> dict[str, Any]:
        """The generation parameters the gate's messages name."""
        return {"max_tokens": self.max_tokens, "thinking": self.thinking}

    def lines(self) -> list[str]:
        """The report for the terminal."""
        sample = self.sample
        out = [
            f"preflight: {sample.describe()}, each sent to {len(self.servers)} server(s) at "
            f"max_tokens {self.max_tokens}, thinking {'on' if self.thinking else 'off'}"
        ]
        if sample.skipped:
            out.append(f"  (not sampled: {', '.join(sample.skipped)}: the producer reads standard input)")
        for server in self.servers:
            if server.problem:
                out.append(f"{server.label}: no answer: {server.problem}")
                continue
            info = server.info
            about = (
                f"{info.kind}, {info.model}, {info.max_running_requests or '?'} slots, context "
                f"{info.context_length or '?'}"
                if info
                else "?"
            )
            out.append(f"{server.label} ({about}): {len(server.answers)} answers")
            out += summarize(server.answers, self.max_tokens).lines()
            out.append(f"  needed     {_needed_line(recommend(server.answers))}")
            if server.verdict is not None:
                out.append(f"  verdict    {server.verdict.line()}")
            if server.breaches:
                reason, _fix = refusal(server.breaches, self.params())
                out.append(f"  refused    {reason}")
        if len(self.servers) > 1 and not self.unreachable:
            out.append(f"the {len(self.servers)} servers together:")
            out += self.summary().lines()
        rec = self.recommendation()
        if rec.applies:
            out.append(f"recommended --max-tokens {_amount(rec)}: {rec.explanation}")
        return out

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (``kafkagen preflight --json``)."""

        def summary(s: Summary) -> dict[str, Any]:
            data = dataclasses.asdict(s)
            data["counts"] = {"results": s.counts.results, "classes": dict(s.counts.classes)}
            return data

        def breach(b: Breach) -> dict[str, Any]:
            return {
                "class": b.cls,
                "count": b.count,
                "results": b.results,
                "share": b.share,
                "threshold": b.threshold,
                "lower_bound": b.bound,
            }

        def verdict(v: Verdict | None) -> dict[str, Any] | None:
            if v is None:
                return None
            return {
                "state": v.state,
                "confidence": v.confidence,
                "classes": [dataclasses.asdict(c) | {"state": c.state} for c in v.classes],
            }

        def recommendation(r: Recommendation) -> dict[str, Any]:
            return dataclasses.asdict(r) | {"applies": r.applies}

        def server(s: ServerPreflight) -> dict[str, Any]:
            info = s.info
            return {
                "name": s.name,
                "url": s.url,
                "kind": info.kind if info else None,
                "model": info.model if info else None,
                "slots": info.max_running_requests if info else None,
                "context_length": info.context_length if info else None,
                "problem": s.problem,
                "summary": summary(summarize(s.answers, self.max_tokens)) if not s.problem else None,
                "recommendation": recommendation(recommend(s.answers)) if not s.problem else None,
                "verdict": verdict(s.verdict),
                "breaches": [breach(b) for b in s.breaches],
                "answers": [dataclasses.asdict(a) for a in s.answers],
            }

        return {
            "passed": self.passed,
            "max_tokens": self.max_tokens,
            "thinking": self.thinking,
            "sample": {
                "source": self.sample.source,
                "prompts": len(self.sample.prompts),
                "scanned": self.sample.scanned,
                "ids": [p.id for p in self.sample.prompts],
            },
            "thresholds": self.thresholds,
            "servers": [server(s) for s in self.servers],
            "summary": summary(self.summary()),
            "recommendation": recommendation(self.recommendation()),
        }


def _amount(rec: Recommendation) -> str:
    return f"{'at least ' if rec.at_least else ''}{rec.max_tokens}"


def _needed_line(rec: Recommendation) -> str:
    if rec.max_tokens is None:
        return "nothing measured"
    again = f", {rec.resent} sent again with {rec.retry_budget}" if rec.resent else ""
    cut = f", {rec.still_cut} still cut off" if rec.still_cut else ""
    cut += f", {rec.unmeasured} cut off not measured" if rec.unmeasured else ""
    advice = f": --max-tokens {_amount(rec)}" if rec.applies else ""
    return f"{rec.needed.line()} tokens (reasoning + answer{again}{cut}){advice}"


def request_seed(seed: int, prompt_id: str) -> int:
    """The sampling seed of the preflight's requests of prompt ``prompt_id`` under the preflight's
    ``seed`` (``--preflight-seed``): a BLAKE2b digest of both, in [0, 2**31) (a signed 32-bit
    integer, as every server takes it). The same for the first send and the re-send, so that a
    server that honours seeds (llama.cpp; SGLang with ``--enable-deterministic-inference``)
    repeats the cut-off answer and the re-send measures what that answer needed."""
    digest = hashlib.blake2b(msgspec.json.encode(["preflight", seed, prompt_id]), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def preflight_body(
    client: ServerClient,
    prompt: PromptRecord,
    run_id: str,
    send: int,
    *,
    seed: int = DEFAULT_SEED,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body of the ``send``-th (1-based) preflight request of
    ``prompt``: the consumer's (:meth:`consumers.servers.ServerClient.request_body`), with a
    ``seed`` from :func:`request_seed` unless the settings or the record set one (the run sends
    theirs), and ``max_tokens`` (tokens) when given (the re-send's larger budget). Its SGLang
    request id is apart from the run's own (:func:`consumers.servers.requests.request_id` of
    ``preflight:<run id>``), so a preflight request still running never collides with the run's."""
    body = client.request_body(prompt, request_id(f"preflight:{run_id}", prompt.id, 0, send))
    body.setdefault("seed", request_seed(seed, prompt.id))
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


async def _ask(
    client: ServerClient,
    prompt: PromptRecord,
    run_id: str,
    send: int,
    seed: int,
    max_tokens: int | None = None,
) -> SampleAnswer:
    """One chat completion of ``prompt`` (:func:`preflight_body`), measured."""
    body = preflight_body(client, prompt, run_id, send, seed=seed, max_tokens=max_tokens)
    budget = int(body.get("max_tokens") or client.generation.max_tokens)
    try:
        answer = await client.chat(body)
    except ServerError as exc:
        text = str(exc).removeprefix(f"{client.base_url}: ")
        return SampleAnswer(prompt.id, budget, error=text, error_retriable=exc.retriable)
    return SampleAnswer(
        prompt_id=prompt.id,
        max_tokens=budget,
        finish_reason=answer.finish_reason,
        prompt_tokens=answer.usage.prompt_tokens,
        completion_tokens=answer.usage.completion_tokens,
        reasoning_tokens=answer.usage.reasoning_tokens,
        reasoning=bool(answer.reasoning_content and answer.reasoning_content.strip()),
        content_chars=len(answer.content),
        flags=tuple(answer_flags(prompt, body, answer)),
        latency_s=answer.latency_s,
    )


async def _measure(
    client: ServerClient,
    info: ServerInfo,
    prompt: PromptRecord,
    run_id: str,
    slots: asyncio.Semaphore,
    resend: bool,
    seed: int,
) -> SampleAnswer:
    """The prompt's answer at the run's settings, with what it needs (``needed``): a cut-off answer
    is sent again with :func:`launch.preflight.stats.retry_budget` (unless ``resend`` is off: then
    it needs at least its budget)."""
    async with slots:
        first = await _ask(client, prompt, run_id, 1, seed)
    if first.finish_reason is None:
        return first
    if not first.truncated:
        return dataclasses.replace(first, needed=first.completion_tokens)
    budget = retry_budget(first.max_tokens, first.prompt_tokens, info.context_length)
    if budget <= first.max_tokens or not resend:  # no more room in the context, or not asked to
        return dataclasses.replace(first, needed=first.max_tokens, needed_at_least=True)
    async with slots:
        again = await _ask(client, prompt, run_id, 2, seed, max_tokens=budget)
    if again.finish_reason is None:  # the re-send failed: more than max_tokens, no more is known
        return dataclasses.replace(first, needed=first.max_tokens, needed_at_least=True)
    return dataclasses.replace(
        first, needed=again.completion_tokens, needed_at_least=again.truncated, resent_at=budget
    )


async def _server(
    name: str,
    url: str,
    generation: GenerationSettings,
    prompts: Sequence[PromptRecord],
    *,
    timeout_s: float,
    run_id: str,
    thresholds: Mapping[str, float],
    resend: bool,
    seed: int,
) -> ServerPreflight:
    client = ServerClient(url, generation, pool_size=max(1, len(prompts)), request_timeout_s=timeout_s)
    try:
        try:
            info = await client.describe(wait_s=min(timeout_s, 30.0))
        except KafkagenError as exc:
            return ServerPreflight(name, url, problem=str(exc).removeprefix(f"{client.base_url}: "))
        slots = asyncio.Semaphore(info.max_running_requests or DEFAULT_SLOTS)
        answers = await asyncio.gather(
            *(_measure(client, info, p, run_id, slots, resend, seed) for p in prompts)
        )
    finally:
        await client.aclose()
    if answers and all(a.finish_reason is None and a.error_retriable for a in answers):
        # Transport failures, timeouts, 5xx on every request: the server is not there to judge. A
        # 400 on every one (a wrong model name, a prompt too long) is the gate's "error" class.
        return ServerPreflight(
            name,
            url,
            info,
            tuple(answers),
            problem=f"none of {len(answers)} requests answered: {answers[0].error}",
        )
    verdict = judge(summarize(answers, generation.max_tokens).counts, thresholds)
    return ServerPreflight(name, url, info, tuple(answers), verdict=verdict)


def run_preflight(
    servers: Mapping[str, str] | Sequence[str],
    generation: GenerationSettings,
    sample: Sample,
    *,
    gate: GateSettings | None = None,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    run_id: str = "default",
    resend: bool = True,
    seed: int = DEFAULT_SEED,
) -> PreflightReport:
    """Send ``sample`` to every server at once with ``generation`` and measure and judge the answers.

    Args:
        servers: name → base URL (``{"gpu-0": "http://127.0.0.1:30000"}``), or URLs (named by themselves).
        generation: the run's generation settings, as the consumers will send them (``max_tokens``
            in tokens, thinking in ``chat_template_kwargs.enable_thinking``).
        sample: the prompts (:func:`launch.preflight.sample.read_sample`).
        gate: the thresholds (default :class:`streams.config.GateSettings`'s).
        timeout_s: seconds one request may take.
        run_id: names the requests' SGLang ids (apart from the run's own).
        resend: send the answers cut off at ``max_tokens`` again with a larger budget, to measure
            what they need (off: they need "at least" their budget; a slow CPU server).
        seed: the preflight's seed (``--preflight-seed``): every request's sampling seed comes from
            it (:func:`request_seed`) unless the settings or the record set one.

    Returns:
        The report; never raises for a server's answers (:func:`check_preflight` does).
    """
    named = dict(servers) if isinstance(servers, Mapping) else {url: url for url in servers}
    thresholds = (gate or GateSettings()).thresholds()

    async def run_all() -> list[ServerPreflight]:
        return list(
            await asyncio.gather(
                *(
                    _server(
                        name,
                        url,
                        generation,
                        sample.prompts,
                        timeout_s=timeout_s,
                        run_id=run_id,
                        thresholds=thresholds,
                        resend=resend,
                        seed=seed,
                    )
                    for name, url in named.items()
                )
            )
        )

    return PreflightReport(
        max_tokens=generation.max_tokens,
        thinking=bool(generation.chat_template_kwargs.get("enable_thinking")),
        sample=sample,
        servers=tuple(asyncio.run(run_all())),
        thresholds=thresholds,
    )


def check_preflight(report: PreflightReport, *, skip_hint: str | None = None) -> None:
    """Raise when a server did not answer or is refused by the gate; ``skip_hint`` (how the command
    goes on without the check) ends the message. A server too few answers cannot judge passes.

    Raises:
        UnavailableError: a server did not answer (exit status 3); the message names each.
        PreflightError: one line per refused server (the classes, shares and bounds), the fix, the
            recommended ``--max-tokens`` where answers were cut off, then ``skip_hint``.
    """
    if report.unreachable:
        raise UnavailableError(
            "\n".join(
                [
                    f"{len(report.unreachable)} of {len(report.servers)} server(s) did not answer the "
                    "preflight:"
                ]
                + [f"  {s.label}: {s.problem}" for s in report.unreachable]
            )
        )
    if not report.failed:
        return
    verdict = report.failed[0].verdict
    assert verdict is not None  # a server with breaches was judged
    lines = [
        f"preflight refused the run: {len(report.failed)} of {len(report.servers)} server(s) fail the gate "
        f"at {verdict.confidence:.0%} confidence (a class's one-sided lower bound above its maximum)"
    ]
    fixes: dict[str, None] = {}
    for server in report.failed:
        reason, fix = refusal(server.breaches, report.params())
        lines.append(f"  {server.name}: {reason}")
        fixes[fix] = None
    lines += [f"fix: {fix}" for fix in fixes]
    rec = report.recommendation()
    if rec.applies:
        lines.append(f"recommended: --max-tokens {_amount(rec)} ({rec.explanation})")
    if skip_hint:
        lines.append(skip_hint)
    raise PreflightError("\n".join(lines))


def preflight(
    servers: Mapping[str, str] | Sequence[str],
    generation: GenerationSettings,
    sample: Sample,
    *,
    gate: GateSettings | None = None,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    run_id: str = "default",
    echo: Callable[[str], None] = print,
    enforce: bool = True,
    waiver: str = "--ignore-preflight",
    resend: bool = True,
    skip_hint: str | None = None,
    seed: int = DEFAULT_SEED,
) -> PreflightReport:
    """:func:`run_preflight`, its report through ``echo``, then :func:`check_preflight` (with
    ``enforce`` False only an unreachable server raises, and a refusal is reported as waived,
    ``waiver`` saying why). A sample without a prompt sends nothing and says why
    (:meth:`launch.preflight.sample.Sample.why_empty`).

    Raises:
        PreflightError: the gate refuses the run (``enforce``).
        UnavailableError: a server did not answer.
    """
    if not sample.prompts:
        echo(f"preflight: {sample.why_empty()}")
        thinking = bool(generation.chat_template_kwargs.get("enable_thinking"))
        return PreflightReport(generation.max_tokens, thinking, sample, ())
    report = run_preflight(
        servers, generation, sample, gate=gate, timeout_s=timeout_s, run_id=run_id, resend=resend, seed=seed
    )
    for line in report.lines():
        echo(line)
    if enforce:
        check_preflight(report, skip_hint=skip_hint)
    elif report.unreachable:
        check_preflight(report)
    elif report.failed:
        echo(f"preflight: the gate refuses these settings, running anyway ({waiver})")
    return report
