"""Samples as one request with SGLang's ``n`` vs one request per sample
(``consumer.parallel_samples``), on one simulated SGLang server (the project's simulator, not SGLang).

Each row publishes ``--prompts`` prompts of ``--samples`` samples each on a one-partition topic,
runs one generation consumer (its own process) against a fresh in-process simulator, once with
``consumer.parallel_samples`` off and once on, and reports from the completion records and the
simulator's counters: the makespan (first request sent to last answer, simulated seconds), the
slot-seconds the server spent (prefill included: a request holds a slot while it prefills), the
requests it received (a shared request is one prefill request plus its ``n`` copies, as in SGLang),
and the completion tokens written. Rows:

* ``long-prompt``: a ~6,000-word passage and a question, thinking off, ``max_tokens`` 256: the
  prefill is a large part of each request's slot time;
* ``medium``: a ~1,500-word passage, thinking off, ``max_tokens`` 1024: answers of uneven length;
* ``thinking``: a GSM8K question, thinking on, ``max_tokens`` 4096: decoding dominates.

The simulator charges every request's prefill in full, cached prefix or not (docs/sglang.md,
"Parallel samples"); real SGLang may already share part of the prefill of separate requests
through its radix cache, so the long-prompt gain is an upper bound. Run from the repository root
with the local stack up::

    .venv/bin/python -m bench.samples --markdown samples.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from bench.children import REPO_ROOT, Children
from bench.fleet.kafka_io import delete_topics, publish_prompts, read_all_values
from simulator import DEFAULT_PROFILE, SimulatedServer
from streams.config import Settings
from streams.environment import settings_to_env
from streams.inputs.samples import sampled
from streams.records import CompletionRecord, GenerationParams, PromptMetadata, PromptRecord
from streams.topics import ensure_topics, topic_specs

__all__ = ["Row", "RowResult", "main"]

GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"


@dataclass(frozen=True)
class Row:
    """One workload: its prompts' shape and parameters."""

    name: str
    passage_words: int
    thinking: bool
    max_tokens: int


ROWS = (
    Row("long-prompt", 6000, False, 256),
    Row("medium", 1500, False, 1024),
    Row("thinking", 0, True, 4096),
)


@dataclass(frozen=True)
class RowResult:
    """One (row, mode) run. Times in simulated seconds, tokens in tokens."""

    row: str
    shared: bool
    makespan_s: float
    p90_s: float
    """first request sent to the answer that completed 90 % of the samples: the makespan without
    the end of the run, where the last requests alone are running."""
    slot_s: float
    requests: int
    shared_requests: int
    completions: int
    completion_tokens: int


def make_prompts(row: Row, prompts: int, samples: int) -> list[PromptRecord]:
    """``prompts`` GSM8K questions (after a passage of ``row.passage_words`` words from the others),
    as their ``samples`` sample records each, siblings next to each other."""
    questions = [json.loads(line)["question"] for line in GSM8K.read_text().splitlines() if line.strip()]
    words = " ".join(questions).split()
    records: list[PromptRecord] = []
    for i in range(prompts):
        passage = " ".join(words[(i * 97) % 1000 :][: row.passage_words])
        content = f"{passage}\n\nQuestion: {questions[i % len(questions)]}" if passage else questions[i]
        record = PromptRecord(
            id=f"bench-{i:05d}",
            messages=[{"role": "user", "content": content}],
            params=GenerationParams(
                max_tokens=row.max_tokens, chat_template_kwargs={"enable_thinking": row.thinking}
            ),
            metadata=PromptMetadata(source="gsm8k/test.jsonl", line=i + 1),
        )
        records += sampled(record, samples)
    return records


async def run_row(row: Row, *, shared: bool, args: argparse.Namespace, logdir: Path) -> RowResult:
    """One consumer against a fresh simulator on fresh topics, until every sample is written."""
    uid = uuid.uuid4().hex[:10]
    base = Settings()
    topics = base.topics.model_copy(
        update={
            "prompts": f"bench-samples-{uid}",
            "completions": f"bench-samples-completions-{uid}",
            "errors": f"bench-samples-errors-{uid}",
            "producer_progress": f"bench-samples-progress-{uid}",
            "partitions": 1,
        }
    )
    consumer = base.consumer.model_copy(update={"group": f"bench-{uid}", "parallel_samples": shared})
    gate = base.gate.model_copy(update={"enabled": False})  # the bench measures delivery, not quality
    settings = base.model_copy(
        update={"topics": topics, "consumer": consumer, "gate": gate, "run_id": f"bench-{uid}"}
    )
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    prompts = make_prompts(row, args.prompts, args.samples)
    children = Children()
    profile = replace(DEFAULT_PROFILE, warmup_s=0.0)
    try:
        async with SimulatedServer(profile, time_scale=args.time_scale) as sim:
            await publish_prompts(settings, prompts, "balanced")
            cmd = ["-m", "consumers.generate", "--server", sim.url, "--instance-id", f"bench-{uid}"]
            log = logdir / f"{row.name}-{'shared' if shared else 'separate'}.log"
            children.spawn("c0", cmd, settings_to_env(settings), log)
            records = await _wait_written(settings, {p.id for p in prompts}, children, log)
            sim.engine.sync()
            slot_s = sim.engine.running_request_seconds
            received = sim.stats().requests_received
    finally:
        children.terminate_all()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                delete_topics(settings, [topics.prompts, topics.completions, topics.errors]), 30
            )
    started = min(r.timings.started_at for r in records)
    ends = sorted(r.timings.finished_at for r in records)
    finished = ends[-1]
    groups = {(r.prompt.prompt_id, r.timings.started_at) for r in records if r.usage.shared_by > 1}
    return RowResult(
        row=row.name,
        shared=shared,
        makespan_s=(finished - started) * args.time_scale,
        p90_s=(ends[int(0.9 * (len(ends) - 1))] - started) * args.time_scale,
        slot_s=slot_s,
        requests=received,
        shared_requests=len(groups),
        completions=len(records),
        completion_tokens=sum(r.usage.completion_tokens for r in records),
    )


async def _wait_written(
    settings: Settings, ids: set[str], children: Children, log: Path
) -> list[CompletionRecord]:
    """The completion records once every id has one (the first of each), failing if the consumer exits."""
    decoder = msgspec.json.Decoder(CompletionRecord)
    deadline = time.monotonic() + 1800
    while True:
        await asyncio.sleep(1.0)
        if children.procs["c0"].poll() is not None:
            raise RuntimeError(f"the consumer exited; see {log}")
        first: dict[str, CompletionRecord] = {}
        for value in await read_all_values(settings, settings.topics.completions):
            record = decoder.decode(value)
            first.setdefault(record.id, record)
        if ids <= set(first):
            return list(first.values())
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(first)} of {len(ids)} samples written after 30 min; see {log}")


def markdown(results: list[RowResult], args: argparse.Namespace, rows: list[Row]) -> str:
    """The results as a Markdown table, shared vs separate per row."""
    lines = [
        f"{args.prompts} prompts × {args.samples} samples, one simulated server "
        f"(default profile: {DEFAULT_PROFILE.max_running_requests} slots, prefill "
        f"{DEFAULT_PROFILE.prefill_tok_s:,.0f} tok/s), time scale {args.time_scale:g}.",
        "",
        "| row | requests per sample | makespan (sim s) | 90 % done (sim s) | slot-seconds "
        "| requests received | shared requests | completion tokens | makespan shared / separate "
        "| 90 % done shared / separate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by = {(r.row, r.shared): r for r in results}
    for row in rows:
        alone = by[(row.name, False)]
        for shared in (False, True):
            r = by[(row.name, shared)]
            ratios = "| |"
            if shared:
                ratios = f"| {r.makespan_s / alone.makespan_s:.3f} | {r.p90_s / alone.p90_s:.3f} |"
            mode = "one with n" if shared else "one each"
            lines.append(
                f"| {row.name} | {mode} | {r.makespan_s:,.0f} | {r.p90_s:,.0f} | {r.slot_s:,.0f} "
                f"| {r.requests:,} | {r.shared_requests:,} | {r.completion_tokens:,} {ratios}"
            )
    return "\n".join(lines) + "\n"


async def amain(args: argparse.Namespace) -> int:
    """Run every row, separate then shared, and print the table."""
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="kafkagen-bench-samples-"))
    logdir.mkdir(parents=True, exist_ok=True)
    results: list[RowResult] = []
    rows = [row for row in ROWS if not args.rows or row.name in args.rows.split(",")]
    for row in rows:
        for shared in (False, True):
            result = await run_row(row, shared=shared, args=args, logdir=logdir)
            print(f"  {result}", file=sys.stderr, flush=True)
            results.append(result)
    table = markdown(results, args, rows)
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line (exit status 0)."""
    parser = argparse.ArgumentParser(prog="python -m bench.samples", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=40, help="prompts per row (default %(default)s)")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt (default %(default)s)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (default %(default)s: the consumer reads the server's "
        "/metrics every 2 wall seconds, so a faster clock makes its readings older in simulated time)",
    )
    parser.add_argument("--rows", help=f"some of {', '.join(r.name for r in ROWS)} (default: all)")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--logdir", type=Path, help="consumer logs (default: a new temporary directory)")
    return asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
