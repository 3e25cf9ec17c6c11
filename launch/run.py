"""``python -m launch.run``: the main job, end to end, on the local stack or on real servers.

1. starts the local stack (Kafka, S3 and, for loopback server URLs, llama.cpp servers);
2. starts one generation consumer per server and the S3 sink as supervisord programs
   (:mod:`launch.supervise`: own process, own log, restarted if it dies, outliving the terminal);
3. publishes the prompt file(s) with ``producers.prompts`` (exactly once: a re-run skips what is
   already published);
4. shows progress until every prompt has a result in Kafka (the generation group's committed
   offsets reach the prompts topic's end) and every result is in S3 (the sink group's committed
   offsets reach the completions and errors topics' ends);
5. runs ``sinks.export`` and prints a summary; stops the consumers and the sink (the stack keeps
   running: ``python -m launch.stack down`` stops it).

Each run has its own topics (``<run id>.prompts``, ``.completions``, ``.errors``), consumer groups
and S3 folder (:mod:`streams.naming`, ``docs/runs.md``), so re-running with the same ``--run-id``
resumes or reports the run as done, and a new run id is an independent run. ``--replay-of RUN``
makes the run a replay: it regenerates run RUN's prompts (topic ``RUN.prompts``) under its own
run id and publishes nothing. Files of a run: ``<stack.home>/runs/<run id>/`` (supervisord
config, logs), the dataset in ``<stack.home>/datasets/<run id>/`` unless ``--to`` says otherwise.

Local defaults (all servers on loopback, i.e. llama.cpp with Gemma-3-270M on CPU): ``max_tokens``
128 and thinking off, so the bundled 100 prompts finish in a few minutes on 2 cores; for real
servers the production defaults hold (``generation.max_tokens`` 4096, thinking on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from tqdm import tqdm

from consumers.client import ServerClient
from launch.stack import LocalStack
from launch.stack.llm import local_port
from launch.supervise import Program, Supervisor
from producers.sample import DEMO_FILE
from streams import naming
from streams.config import Settings, check_server_url, load_settings, settings_to_env
from streams.errors import ConfigError, KafkagenError
from streams.kafka import consumer_kwargs, end_offsets
from streams.topics import ensure_topics, topic_specs

LOCAL_MAX_TOKENS = 128
"""``max_tokens`` when every server is a local llama.cpp server (2-core CPU budget)."""


@dataclass
class Progress:
    """Counts in Kafka offsets (a transactional topic's markers make them slightly larger than
    record counts; they reach the end together)."""

    prompts_end: int = 0
    generated: int = 0
    results_end: int = 0
    in_s3: int = 0
    load_samples: list[float] = field(default_factory=list)
    already_done: bool = False
    """the run was complete before this invocation generated anything (a re-run)."""

    @property
    def done(self) -> bool:
        return self.prompts_end > 0 and self.generated >= self.prompts_end and self.in_s3 >= self.results_end


def run_settings(settings: Settings, args: argparse.Namespace) -> Settings:
    """Apply the run's choices to ``settings``: per-run topics, servers, budget, thinking.

    The topics are always the run's own (:func:`streams.naming.derived_topics`: ``<run>.prompts``,
    or ``<replay_of>.prompts`` for a replay, ``<run>.completions``, ``<run>.errors``), whatever
    ``topics.*`` says: the main job keeps every run apart (``docs/runs.md``).

    Raises:
        ConfigError: a ``--server`` value is not an http(s) URL (:func:`check_server_url`).
    """
    run = settings.run_id
    for url in args.server or ():
        try:
            check_server_url(url)
        except ValueError as exc:
            raise ConfigError(f"--server {exc}") from None
    topics = settings.topics.model_copy(update=naming.derived_topics(run, settings.replay_of))
    servers = args.server or settings.servers
    local = all(local_port(u) is not None for u in servers)
    gen = settings.generation
    max_tokens = args.max_tokens or (LOCAL_MAX_TOKENS if local else gen.max_tokens)
    thinking = (
        args.thinking
        if args.thinking is not None
        else (not local and gen.chat_template_kwargs.get("enable_thinking", True))
    )
    generation = gen.model_copy(
        update={
            "max_tokens": max_tokens,
            "chat_template_kwargs": {**gen.chat_template_kwargs, "enable_thinking": thinking},
        }
    )
    # Static membership for the sink: a restarted sink gets its partitions back at once.
    sink = settings.sink.model_copy(update={"instance_id": settings.sink.instance_id or f"{run}-sink"})
    return settings.model_copy(
        update={"topics": topics, "servers": servers, "generation": generation, "sink": sink}
    )


async def _offsets(settings: Settings, group: str | None, topics: Sequence[str]) -> tuple[int, int]:
    """(sum of the group's committed offsets, sum of end offsets) over every partition of ``topics``."""
    ends = {t: await end_offsets(settings.kafka, t) for t in topics}
    committed = 0
    if group is not None:
        consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group))
        await consumer.start()
        try:
            for topic, by_partition in ends.items():
                for partition in by_partition:
                    committed += await consumer.committed(TopicPartition(topic, partition)) or 0
        finally:
            await consumer.stop()
    return committed, sum(sum(e.values()) for e in ends.values())


async def _progress(settings: Settings) -> Progress:
    t = settings.topics
    generated, prompts_end = await _offsets(settings, naming.generate_group(settings), [t.prompts])
    in_s3, results_end = await _offsets(settings, naming.sink_group(settings), [t.completions, t.errors])
    return Progress(prompts_end=prompts_end, generated=generated, results_end=results_end, in_s3=in_s3)


@dataclass
class FleetLoad:
    """Running and queued requests summed over the servers that report them, and the mean
    occupancy over them: 1 for a server with requests waiting (it runs all that its running limit
    or its KV cache allows; SGLang's automatic running limit is in the thousands, so the cache is
    usually what binds), else running / running limit (None if no server tells)."""

    running: int = 0
    queued: int = 0
    occupancy: float | None = None

    def describe(self) -> str:
        busy = "?" if self.occupancy is None else f"{self.occupancy:.0%}"
        return f"running {self.running}, queued {self.queued}, slots busy {busy}"


async def _fleet_load(clients: list[ServerClient]) -> FleetLoad:
    fleet = FleetLoad()
    ratios = []
    for client in clients:
        load = await client.load()
        if load is None:
            continue
        fleet.running += load.running
        fleet.queued += load.queued
        slots = client.info.max_running_requests if client.info else None
        if load.queued > 0:
            ratios.append(1.0)  # work waits on the server: it runs all it can (KV-cache bound)
        elif slots:
            ratios.append(min(1.0, load.running / slots))
    fleet.occupancy = sum(ratios) / len(ratios) if ratios else None
    return fleet


async def wait_until_done(settings: Settings, timeout_s: float | None, show: bool) -> Progress:
    """Poll offsets every second until the run is done; draw two progress bars on stderr.

    Raises:
        TimeoutError: not done within ``timeout_s`` seconds.
    """
    clients = [ServerClient(u, settings.generation) for u in settings.servers]
    # Kafka offsets, not records: the producer's transaction markers add one offset per partition
    # and transaction, so "generated" runs a little above the prompt count; "to S3" is out of the
    # results written so far, a total that grows as completions arrive.
    gen_bar = tqdm(desc="generated", unit="offset", disable=not show, dynamic_ncols=True)
    s3_bar = tqdm(desc="to S3    ", unit="offset", disable=not show, dynamic_ncols=True)
    first = True
    samples: list[float] = []
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        for client in clients:
            await client.describe()
        while True:
            try:
                progress = await _progress(settings)
            except (TimeoutError, KafkaError, OSError) as exc:  # e.g. the broker restarting
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {settings.run_id}: Kafka unreachable: {exc}") from None
                await asyncio.sleep(2.0)
                continue
            load = await _fleet_load(clients)
            if load.occupancy is not None and progress.generated < progress.prompts_end:
                samples.append(load.occupancy)
            gen_bar.set_postfix_str(load.describe(), refresh=False)
            for bar, n, total in (
                (gen_bar, progress.generated, progress.prompts_end),
                (s3_bar, progress.in_s3, progress.results_end),
            ):
                bar.total = total
                bar.n = min(n, total)
                bar.refresh()
            if progress.done:
                progress.load_samples = samples
                progress.already_done = first
                return progress
            first = False
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {settings.run_id} not done after {timeout_s:.0f} s: {progress}")
            await asyncio.sleep(1.0)
    finally:
        gen_bar.close()
        s3_bar.close()
        for client in clients:
            await client.aclose()


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def summary(
    manifest: dict[str, Any],
    wall_s: float,
    occupancy: float | None,
    dataset: str,
    *,
    already_done: bool = False,
) -> str:
    """The closing summary, from the export's ``manifest.json`` (see :mod:`sinks.export`)."""
    m = manifest
    records, tokens = m["records"], m["tokens"]
    expected = (m.get("expected") or {}).get("ids", "?")
    lines = [
        "",
        f"run {m['run_id']}: done in {wall_s:.0f} s",
        f"  prompts      {expected}",
        f"  completions  {records['completions']}",
        f"  errors       {records['errors']}",
        f"  missing      {m['missing']['count']}",
        f"  duplicates   {m['duplicates']['records_dropped']} records dropped by the export",
        f"  tokens       prompt {tokens['prompt']}, completion {tokens['completion']}, "
        f"reasoning {tokens['reasoning']}",
    ]
    if already_done:
        lines[1] = (
            f"run {m['run_id']}: already complete (nothing generated now; re-exported in {wall_s:.0f} s)"
        )
    else:
        rate = tokens["completion"] / max(wall_s, 1e-9)
        lines.append(f"  tokens/s     {rate:.1f} (completion tokens / wall time)")
    if occupancy is not None:
        lines.append(
            f"  slots busy   {occupancy:.0%} (mean over servers while generating: 100% with requests "
            "queued, else running / running limit)"
        )
    lines.append(f"  finish       {json.dumps(m['by_finish_reason'], sort_keys=True)}")
    lines.append(f"  quality      {json.dumps(m['by_quality_flag'], sort_keys=True)}")
    lines.append(f"  dataset      {dataset}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 done, 1 failed, 2 bad usage)."""
    parser = argparse.ArgumentParser(prog="python -m launch.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--prompts",
        action="append",
        type=Path,
        help=f"prompt file(s), any format producers.prompts reads (default {DEMO_FILE})",
    )
    parser.add_argument(
        "--server",
        action="append",
        help="inference server URL, once per server (default: the local llama.cpp servers)",
    )
    parser.add_argument(
        "--max-tokens", type=int, help=f"tokens per completion (local default {LOCAL_MAX_TOKENS})"
    )
    thinking = parser.add_mutually_exclusive_group()
    thinking.add_argument(
        "--thinking",
        dest="thinking",
        action="store_true",
        default=None,
        help="ask for reasoning (chat_template_kwargs.enable_thinking)",
    )
    thinking.add_argument("--no-thinking", dest="thinking", action="store_false")
    parser.add_argument("--run-id", help="name of the run (default: demo); the same id resumes")
    parser.add_argument(
        "--to",
        help="dataset destination: a folder or s3://bucket/prefix (default <stack home>/datasets/<run id>)",
    )
    parser.add_argument("--timeout", type=float, help="give up after this many seconds")
    parser.add_argument(
        "--keep-running", action="store_true", help="leave the consumers and the sink running"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(Settings, rest, prog=parser.prog)
        run_id = args.run_id or ("demo" if settings.run_id == "default" else settings.run_id)
        try:
            settings = naming.for_run(settings, run_id)
        except ValueError as exc:
            raise ConfigError(f"--run-id: {exc}") from None
        settings = run_settings(settings, args)
        return _run(settings, args)
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(settings: Settings, args: argparse.Namespace) -> int:
    started = time.monotonic()
    root = Path(__file__).resolve().parents[1]
    stack = LocalStack(settings)
    say = print
    gen = settings.generation
    thinking = gen.chat_template_kwargs.get("enable_thinking")
    say(
        f"run {settings.run_id}: servers {', '.join(settings.servers)}; "
        f"max_tokens {gen.max_tokens}; thinking {thinking}"
    )
    kinds = ["kafka", "s3"] + (["llm"] if stack.llm_ports else [])
    stack.up(kinds, echo=say)
    specs = topic_specs(settings)
    asyncio.run(ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]]))

    env = settings_to_env(settings)
    programs = [
        Program(
            f"generate-{i}",
            tuple(
                _python(
                    "-m",
                    "consumers.generate",
                    "--server",
                    url,
                    "--instance-id",
                    f"{settings.run_id}-generate-{i}",
                )
            ),
        )
        for i, url in enumerate(settings.servers)
    ]
    programs.append(Program("sink", tuple(_python("-m", "sinks.s3"))))
    supervisor = Supervisor(stack.home / "runs" / settings.run_id, env)
    supervisor.start(programs, cwd=root)
    say(f"consumers and sink started under supervisord; logs in {supervisor.log_dir}")
    try:
        if settings.replay_of is not None:
            say(
                f"run {settings.run_id} replays run {settings.replay_of}: regenerating the prompts of "
                f"{settings.topics.prompts}, publishing nothing"
                + (" (--prompts ignored)" if args.prompts else "")
            )
        else:
            prompts = args.prompts or [DEMO_FILE]
            publish = subprocess.run(
                _python(
                    "-m",
                    "producers.prompts",
                    *map(str, prompts),
                    "--keep-field",
                    "source",
                    "--keep-field",
                    "reference",
                    "--bad-lines",
                    str(supervisor.home / "bad-lines.jsonl"),
                    *(["--no-progress"] if args.no_progress else []),
                ),
                env={**os.environ, **env},
                cwd=root,
                check=False,
            )
            if publish.returncode not in (0, 1):
                say(f"error: publishing failed (exit {publish.returncode}); see the messages above")
                return 1
        progress = asyncio.run(wait_until_done(settings, args.timeout, show=not args.no_progress))
        dataset = args.to or str(stack.home / "datasets" / settings.run_id)
        export = subprocess.run(
            _python("-m", "sinks.export", "--run", settings.run_id, "--to", dataset),
            env={**os.environ, **env},
            cwd=root,
            check=False,
            capture_output=True,
            text=True,
        )
        if export.returncode != 0:
            say(export.stdout + export.stderr)
            say(f"error: export failed (exit {export.returncode})")
            return 1
        manifest = _read_manifest(dataset, settings)
        occupancy = (
            (sum(progress.load_samples) / len(progress.load_samples)) if progress.load_samples else None
        )
        wall = time.monotonic() - started
        say(summary(manifest, wall, occupancy, dataset, already_done=progress.already_done))
        return 0
    finally:
        if not args.keep_running:
            supervisor.shutdown()
            say(
                "consumers and sink stopped; the local stack keeps running "
                f"({Path(sys.executable).as_posix()} -m launch.stack down stops it)"
            )


def _read_manifest(dataset: str, settings: Settings) -> dict[str, Any]:
    if dataset.startswith("s3://"):
        from streams.storage import s3_client

        bucket, _, prefix = dataset.removeprefix("s3://").partition("/")
        key = f"{prefix.rstrip('/')}/manifest.json" if prefix else "manifest.json"
        body = s3_client(settings.s3).get_object(Bucket=bucket, Key=key)["Body"].read()
        data = json.loads(body)
    else:
        data = json.loads((Path(dataset) / "manifest.json").read_text())
    assert isinstance(data, dict)
    return data


if __name__ == "__main__":
    sys.exit(main())
