"""The main job (``kafkagen run``, ``python -m launch.run``), end to end, on the local stack or
on real servers: the checks, the stack and the servers (``--serve``: a fleet), the preflight, the
run's record and fleet, the consumers and the sink under supervisord, publishing, progress until
every prompt is in S3, the export and its summary.

:func:`plan_run` applies the run's choices to the settings, :func:`run` runs the steps. The steps,
a run's files, the local defaults and halt/resume: docs/main-job.md.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from aiokafka.errors import KafkaError

from launch.gate.control import halt_lines, resume_if_halted, unjudged_breach
from launch.preflight.options import PreflightOptions, run_preflight_for
from launch.preflight.sample import read_sample
from launch.run.progress import Progress, wait_until_done
from launch.run.progress import progress as progress_now
from launch.run.prompt_check import check_prompts
from launch.run.replays import check_replay
from launch.run.servers import describe_server, embedded_llm, wait_for_servers
from launch.run.summary import read_manifest, summary
from launch.scale.control import fleet_if_up, settle_fleet
from launch.scale.policy import consumer_programs, same_servers
from launch.scale.watch import FleetWatch
from launch.serve.fleet import Fleet
from launch.serve.spec import FleetSpec
from launch.stack import LocalStack
from launch.stack.llm import local_port
from launch.stack.process import port_owner
from launch.supervise import Program, Supervisor
from producers.sample import DEMO_FILE
from streams.config import Settings, check_server_url
from streams.environment import settings_to_env
from streams.errors import ConfigError, StackError
from streams.inputs import InputMapping
from streams.kafka import end_offsets
from streams.runs import naming
from streams.topics import ensure_topics, topic_specs

__all__ = [
    "DEMO_KEEP_FIELDS",
    "LOCAL_GATE",
    "LOCAL_MAX_TOKENS",
    "REPO_ROOT",
    "RunOptions",
    "RunPlan",
    "export_argv",
    "metrics_port_args",
    "plan_run",
    "producer_argv",
    "run",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository the job runs from: the working directory of its children (producer, consumers,
sink, export), so that their ``python -m`` imports this checkout's code first."""

LOCAL_MAX_TOKENS = 128
"""``max_tokens`` for the llama.cpp servers the main job starts itself (2-core CPU budget)."""

LOCAL_GATE = {
    "max_truncated": 1.0,
    "max_echoed_prompt": 1.0,
    "max_repetition_loop": 0.6,
    "max_degenerate": 0.9,
}
"""The quality gate's thresholds for the llama.cpp servers the main job starts itself, where the
user set none: Gemma-3-270M on CPU at 128 tokens stops at ``length`` on nearly every prompt and
repeats a third of them (measured on the demo file: truncated 99-100, echoed_prompt 29-30,
repetition_loop 21-22 of 100), which would halt the demo at once; the local run shows the gate
counting, not halting. Every other run keeps the production thresholds (``settings.gate``)."""

DEMO_KEEP_FIELDS = ("source", "reference")
"""Fields kept in ``metadata.extra`` when no ``--keep-field`` is given (the bundled demo file's)."""


@dataclass(frozen=True)
class RunOptions:
    """What one invocation of the main job asks for, beyond the settings (``kafkagen run --help``)."""

    prompts: tuple[str, ...] = ()
    """prompt inputs as ``kafkagen produce`` takes them (files, globs, ``-``, ``s3://``); none: the
    bundled demo file (:data:`producers.sample.DEMO_FILE`)."""
    servers: tuple[str, ...] = ()
    """inference server URLs (``--server``); none: ``settings.servers``."""
    local_llm: bool = False
    """``--local-llm``: start llama.cpp on the (loopback) server ports even when they were given."""
    server_timeout_s: float | None = None
    """seconds to wait for servers already running; none: ``consumer.startup_timeout_s``."""
    mapping: InputMapping = field(default_factory=InputMapping)
    """the producer's input mapping options (:func:`producers.cli.mapping_options`)."""
    max_tokens: int | None = None
    thinking: bool | None = None
    to: str | None = None
    """dataset destination: a folder or ``s3://bucket/prefix``; none: the run's dataset folder,
    ``<home>/datasets/<run>`` (:func:`streams.runs.naming.dataset_folder`)."""
    timeout_s: float | None = None
    keep_running: bool = False
    progress: bool = True
    serve: FleetSpec | None = None
    """``--serve``: launch this fleet (:class:`launch.serve.fleet.Fleet`, idempotent) and use its servers."""
    preflight: PreflightOptions = field(default_factory=PreflightOptions)
    """the preflight before anything is published (:mod:`launch.preflight.check`): ``--no-preflight``,
    ``--ignore-preflight``, ``--preflight-sample``, ``--preflight-timeout``."""
    metrics_port: int | None = None
    """``--metrics-port BASE``: Prometheus metrics (``docs/metrics.md``) on 127.0.0.1, the producer
    on BASE, the sink on BASE+1, consumer i on BASE+2+i (:func:`metrics_port_args`); none: off."""
    export_formats: tuple[str, ...] = ()
    """``--export-format``: the dataset formats (``kafkagen export --output-format``); none: ``jsonl``."""


@dataclass(frozen=True)
class RunPlan:
    """What :func:`run` runs: the run's settings and whether it starts its llama.cpp servers."""

    settings: Settings
    """as :func:`plan_run` made them: the run's topics, servers, budget and thinking."""
    embedded: bool
    """True: the job starts a llama.cpp server on each (loopback) URL of ``settings.servers``;
    False: the servers are running already and are used as they are."""


def plan_run(settings: Settings, options: RunOptions) -> RunPlan:
    """Apply the run's choices to ``settings`` (as loaded, before any other change: whether the
    user set ``servers`` is read from them, :func:`launch.run.servers.servers_set_by_user`): per-run
    topics (always the run's own, whatever ``topics.*`` says), servers, budget, thinking
    (:data:`LOCAL_MAX_TOKENS` and off for the embedded llama.cpp servers only). docs/main-job.md.

    Raises:
        ConfigError: a ``--server`` value is not an http(s) URL (:func:`check_server_url`);
            llama.cpp is to be started for a URL that is not ``127.0.0.1:<port>``; ``--serve``
            with ``--server`` or ``--local-llm``; no server at all (``KAFKAGEN_SERVERS='[]'``), or
            the same server twice (``http://h:1`` and ``http://h:1/``).
    """
    run = settings.run_id
    if options.serve is not None and (options.servers or options.local_llm):
        raise ConfigError(
            "--serve launches the servers the run uses: drop --server and --local-llm, or drop --serve "
            "to use servers already running"
        )
    for url in options.servers:
        try:
            check_server_url(url)
        except ValueError as exc:
            raise ConfigError(f"--server {exc}") from None
    embedded = options.serve is None and embedded_llm(settings, options.servers, local_llm=options.local_llm)
    servers = options.serve.urls if options.serve else list(options.servers) or settings.servers
    if not servers:
        raise ConfigError(
            "the run has no inference server: the servers setting is empty (KAFKAGEN_SERVERS='[]' or "
            "--servers '[]'); give --server URL (once per server) or --serve MODEL_PATH --gpus N, or "
            "unset it for the embedded default (two local llama.cpp servers)"
        )
    if options.metrics_port is not None and options.metrics_port + 1 + len(servers) > 65535:
        raise ConfigError(f"--metrics-port {options.metrics_port}: needs ports up to BASE+{1 + len(servers)}")
    seen: dict[str, str] = {}
    for url in servers:
        same = seen.setdefault(url.rstrip("/"), url)
        if same is not url:
            raise ConfigError(
                f"server {url} is given twice ({same!r} and {url!r}): one consumer per server, each sized "
                "to its server's slots; give each server once"
            )
    if embedded:
        for url in servers:
            if local_port(url) is None:  # raises ConfigError for a loopback URL without a port
                raise ConfigError(
                    f"--local-llm starts llama.cpp on 127.0.0.1 only, and {url} is not a loopback URL: "
                    "drop --local-llm to use the servers as they are"
                )
    topics = settings.topics.model_copy(update=naming.derived_topics(run, settings.replay_of))
    gen = settings.generation
    max_tokens = options.max_tokens or (LOCAL_MAX_TOKENS if embedded else gen.max_tokens)
    thinking = (
        options.thinking
        if options.thinking is not None
        else (not embedded and gen.chat_template_kwargs.get("enable_thinking", True))
    )
    generation = gen.with_budget(max_tokens, thinking)
    # Static membership for the sink: a restarted sink gets its partitions back at once.
    sink = settings.sink.model_copy(update={"instance_id": settings.sink.instance_id or f"{run}-sink"})
    gate = settings.gate
    if embedded:
        local = {k: v for k, v in LOCAL_GATE.items() if k not in gate.model_fields_set}
        gate = gate.model_copy(update=local)
    updated = settings.model_copy(
        update={"topics": topics, "servers": servers, "generation": generation, "sink": sink, "gate": gate}
    )
    return RunPlan(updated, embedded)


def producer_argv(options: RunOptions, bad_lines: Path) -> list[str]:
    """The ``python -m producers.prompts`` arguments for ``options``: the prompt inputs (default the
    demo file), the mapping options, and :data:`DEMO_KEEP_FIELDS` unless ``--keep-field`` is given.
    A template given as text is written beside ``bad_lines`` (the run folder), the argv names it."""
    mapping = options.mapping.with_template_files(bad_lines.parent)
    keep = [] if mapping.rows.keep_fields else [a for f in DEMO_KEEP_FIELDS for a in ("--keep-field", f)]
    return [
        *(options.prompts or (str(DEMO_FILE),)),
        *mapping.argv(),
        *keep,
        "--bad-lines",
        str(bad_lines),
        *(["--no-progress"] if not options.progress else []),
        *metrics_port_args(options, 0),
    ]


def export_argv(options: RunOptions, run_id: str, dataset: str) -> list[str]:
    """The ``python -m sinks.export`` arguments of the job's export of ``run_id`` into ``dataset``:
    each ``--export-format`` as the export's ``--output-format``."""
    formats = [arg for fmt in options.export_formats for arg in ("--output-format", fmt)]
    return ["--run-id", run_id, "--to", dataset, *formats]


def metrics_port_args(options: RunOptions, offset: int) -> list[str]:
    """``["--metrics-port", BASE + offset]`` with ``--metrics-port BASE``, else nothing (offsets:
    producer 0, sink 1, consumer i 2+i; :attr:`RunOptions.metrics_port`)."""
    return [] if options.metrics_port is None else ["--metrics-port", str(options.metrics_port + offset)]


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def _check_llm_ports(stack: LocalStack) -> None:
    """Before the job starts its llama.cpp servers: a port held by a process the stack did not
    start may well be the user's own server (SGLang on a GPU host), so say how to use it.

    Raises:
        StackError: a llama.cpp port is taken by another process.
    """
    for port in stack.llm_ports:
        owner = port_owner(port)
        if owner is not None and stack.processes.process(f"llm-{port}") is None:
            raise StackError(
                f"the main job starts llama.cpp on 127.0.0.1:{port} (the embedded default), but the port "
                f"is taken by {owner}. If that is an inference server, use it as it is: --server "
                f"http://127.0.0.1:{port} (once per server); otherwise stop it"
            )


def run(plan: RunPlan, options: RunOptions) -> int:
    """Run the job (the steps: docs/main-job.md) as :func:`plan_run` planned it; returns the
    exit status (0 done, 1 publishing or the export failed).

    Raises:
        InputError: a prompt file is missing or unreadable (:func:`check_prompts`), before anything
            is started.
        UnavailableError: a server already running did not answer within ``options.server_timeout_s``
            (default ``consumer.startup_timeout_s``), before the stack is started.
        ConfigError: a replay that cannot be (:func:`launch.run.replays.check_replay`), before any topic
            of it is created.
        PreflightError: the preflight's sample trips the quality gate at the run's generation
            settings (e.g. the budget went to reasoning), before anything is published.
        ServiceNotReadyError: a ``--serve`` server failed to start or was not ready in time.
        TimeoutError: not done within ``options.timeout_s`` seconds.
        KafkagenError: the stack or a topic could not be set up.
    """
    started = time.monotonic()
    settings = plan.settings
    if settings.replay_of is None:
        check_prompts(options.prompts, skip_unreadable=options.mapping.skip_unreadable)
    root = REPO_ROOT
    # The stack serves a llama-server per loopback URL of `servers`: only when the job starts them.
    stack = LocalStack(settings if plan.embedded else settings.model_copy(update={"servers": []}))
    say = print
    # The run's fleet as `kafkagen scale` left it, when Kafka answers already (else once it is up).
    by, command_servers = f"kafkagen run@{socket.gethostname()}", list(settings.servers)
    early = fleet_if_up(settings, command_servers, by=by, echo=say)
    if early is not None:
        settings = settings.model_copy(update={"servers": early.servers})
    gen = settings.generation
    thinking = gen.chat_template_kwargs.get("enable_thinking")
    origin = (
        "local llama.cpp, started here"
        if plan.embedded
        else f"fleet {options.serve.name!r}, launched here"
        if options.serve
        else "running already, used as they are"
    )
    say(
        f"run {settings.run_id}: servers {', '.join(settings.servers)} ({origin}); "
        f"max_tokens {gen.max_tokens}; thinking {'on' if thinking else 'off'}"
    )
    # A finished run whose input holds nothing new needs no server, preflight, consumer or sink.
    done = _finished_already(settings, options, stack.home, say=say) if early is not None else None
    if done is not None:
        stack.up(["kafka", "s3"], echo=say)
        return _export_and_report(settings, options, done, started, resumed=True, after_halt=False, say=say)
    # The preflight names a fleet's servers gpu-<i>, any other server by its URL.
    names: dict[str, str] | list[str] = settings.servers
    if options.serve is not None:
        Fleet(settings.home, options.serve.name).up(options.serve, echo=say)
        if same_servers(options.serve.urls, settings.servers):
            names = options.serve.servers
    if plan.embedded:
        _check_llm_ports(stack)
        stack.up(["kafka", "s3", "llm"], echo=say)
        wait_s = stack.stack_settings.ready_timeout_s
        hint = "the local llama.cpp servers: see kafkagen stack logs"
    else:
        wait_s = options.server_timeout_s or settings.consumer.startup_timeout_s
        hint = (
            "check that the server runs at that address, or wait longer with --server-timeout; to have "
            "the main job start llama.cpp on a loopback port instead, add --local-llm"
        )
        if options.serve is None:
            say(f"waiting up to {wait_s:.0f} s for the servers to answer")
    ready = wait_for_servers(settings.servers, gen, timeout_s=wait_s, hint=hint, busy=say)
    for info in asyncio.run(ready):
        say(describe_server(info))
    if options.preflight.enabled:
        # The sample is the run's own input (a replay's is in Kafka: the demo prompts then). The
        # embedded llama.cpp servers, a CPU stand-in that rambles at 128 tokens (~30 s a request
        # on 2 cores), get a short preflight that reports and never refuses: 4 prompts are too few
        # to judge even LOCAL_GATE's permissive thresholds, which the run's own gate applies.
        pre = options.preflight
        if plan.embedded:
            waiver = "the embedded llama.cpp servers are a CPU stand-in: reported, not enforced"
            pre = replace(pre, sample=min(pre.sample, 4), enforce=False, waiver=waiver)
        sample = (
            read_sample(options.prompts, options.mapping, settings, size=pre.sample, seed=pre.seed)
            if settings.replay_of is None
            else None
        )
        run_preflight_for(
            names,
            gen,
            settings,
            pre,
            sample=sample,
            resend=not plan.embedded,
            echo=say,
            skip_hint="--ignore-preflight runs anyway, --no-preflight skips the preflight"
            + (
                f"; the fleet keeps running: kafkagen serve down --fleet {options.serve.name}"
                if options.serve
                else ""
            ),
        )
    if not plan.embedded:
        stack.up(["kafka", "s3"], echo=say)
    asyncio.run(check_replay(settings))  # before any topic of a mistaken replay is created
    specs = topic_specs(settings)
    asyncio.run(ensure_topics(settings, [specs[r] for r in ("prompts", "completions", "errors", "control")]))
    # The run's record and its fleet, written now (a scale may have come in since `early`).
    servers = asyncio.run(settle_fleet(settings, command_servers, early, by=by, echo=say))
    settings = settings.model_copy(update={"servers": servers})

    # What the run had generated before this invocation (> 0: a resumed run), read before any
    # consumer of this invocation starts.
    generated_before = asyncio.run(progress_now(settings)).generated

    env = settings_to_env(settings)
    make_program = consumer_programs(settings, options.metrics_port)
    programs = [make_program(url) for url in settings.servers]
    programs.append(Program("sink", tuple(_python("-m", "sinks.s3", *metrics_port_args(options, 1)))))
    supervisor = Supervisor(stack.home / "runs" / settings.run_id, env)
    supervisor.start(programs, cwd=root)
    say(f"consumers and sink started under supervisord; logs in {supervisor.log_dir}")
    # Follow `kafkagen scale`: one consumer per server of the run's fleet record.
    watch = FleetWatch(settings, supervisor, servers=settings.servers, make_program=make_program, echo=say)
    watch.start()
    # A re-run of a halted run is its resume: the consumers just started have the new settings.
    resumed = asyncio.run(resume_if_halted(settings, by=f"kafkagen run@{socket.gethostname()}"))
    if resumed:
        say(resumed)
    bad_lines = supervisor.home / "bad-lines.jsonl"
    try:
        if settings.replay_of is not None:
            say(
                f"run {settings.run_id} replays run {settings.replay_of}: regenerating the prompts of "
                f"{settings.topics.prompts}, publishing nothing"
                + (" (--prompts ignored)" if options.prompts else "")
            )
        else:
            published = _publish(settings, options, bad_lines)
            if published not in (0, 1):
                say(f"error: publishing failed (exit {published}); see the messages above")
                return 1
        if not sum(asyncio.run(end_offsets(settings.kafka, settings.topics.prompts)).values()):
            # Progress waits for the prompts topic's end: with nothing in it, it would wait forever.
            say(
                f"error: nothing to generate: {settings.topics.prompts} holds no prompt"
                + (
                    f" (every input line was bad: see {bad_lines}; map the rows with --input-format, "
                    "--prompt-field, ...)"
                    if settings.replay_of is None
                    else f" (run {settings.replay_of} published none)"
                )
            )
            return 1
        progress = asyncio.run(wait_until_done(settings, options.timeout_s, show=options.progress))
        if progress.halted is not None:
            for line in halt_lines(settings.run_id, progress.halted.reason, progress.halted.fix):
                say(line)
            return 1
        return _export_and_report(
            settings,
            options,
            progress,
            started,
            resumed=generated_before > 0,
            after_halt=resumed is not None,
            say=say,
        )
    finally:
        watch.stop()
        if not options.keep_running:
            supervisor.shutdown()
            say(
                "consumers and sink stopped; the local stack keeps running "
                f"({Path(sys.executable).with_name('kafkagen').as_posix()} stack down stops it, with "
                "the same KAFKAGEN_* addresses)"
                + (
                    f"; the fleet keeps running (kafkagen serve down --fleet {options.serve.name} stops it)"
                    if options.serve
                    else ""
                )
            )


def _publish(settings: Settings, options: RunOptions, bad_lines: Path) -> int:
    """Run the producer on the job's input (:func:`producer_argv`); returns its exit status
    (0 or 1: published, 1 with bad lines; else it failed and said why)."""
    argv = _python("-m", "producers.prompts", *producer_argv(options, bad_lines))
    env = {**os.environ, **settings_to_env(settings)}
    return subprocess.run(argv, env=env, cwd=REPO_ROOT, check=False).returncode


def _finished_already(
    settings: Settings, options: RunOptions, home: Path, *, say: Callable[[str], None]
) -> Progress | None:
    """The run's progress when it was complete before this invocation and still is once its
    input was published again (the producer publishes only rows added since, the others it only
    checks: docs/producer.md, "Resume points"); else None (also when Kafka does not answer).
    A replay publishes nothing, so it is complete when its generation and sink are."""
    try:
        before = asyncio.run(progress_now(settings))
    except (KafkaError, TimeoutError, OSError):
        return None
    if not before.done or before.halted is not None:
        return None
    if settings.replay_of is None:
        say(f"run {settings.run_id}: complete before; checking its input for rows added since")
        bad_lines = home / "runs" / settings.run_id / "bad-lines.jsonl"
        bad_lines.parent.mkdir(parents=True, exist_ok=True)
        if _publish(settings, options, bad_lines) not in (0, 1):
            return None  # the normal path publishes again and reports the failure
        after = asyncio.run(progress_now(settings))
        if not after.done or after.prompts_end != before.prompts_end:
            return None
        before = after
    before.already_done = True
    return before


def _export_and_report(
    settings: Settings,
    options: RunOptions,
    progress: Progress,
    started: float,
    *,
    resumed: bool,
    after_halt: bool,
    say: Callable[[str], None],
) -> int:
    """Export the done run to its dataset, print the summary and judge the whole run by its gate;
    returns the exit status (0, or 1: the export failed or the gate fails the run). ``started``:
    when this invocation started (``time.monotonic()``), for the summary's wall time."""
    dataset = options.to or str(naming.dataset_folder(settings.home, settings.run_id))
    export = subprocess.run(
        _python("-m", "sinks.export", *export_argv(options, settings.run_id, dataset)),
        env={**os.environ, **settings_to_env(settings)},
        cwd=REPO_ROOT,
        check=False,
        capture_output=True,
        text=True,
    )
    if export.returncode != 0:
        say(export.stdout + export.stderr)
        say(f"error: export failed (exit {export.returncode})")
        return 1
    manifest = read_manifest(dataset, settings)
    occupancy = (sum(progress.load_samples) / len(progress.load_samples)) if progress.load_samples else None
    wall = time.monotonic() - started
    say(
        summary(
            manifest,
            wall,
            occupancy,
            dataset,
            already_done=progress.already_done,
            resumed=resumed,
            after_halt=after_halt,
        )
    )
    # A run shorter than the gate's warm-up ends before an early trip is certain: judge it whole.
    verdict = asyncio.run(unjudged_breach(settings))
    if verdict is not None:
        say(f"error: run {settings.run_id} fails its quality gate {verdict[0]}")
        say(f"fix: {verdict[1]}; the dataset above keeps these results")
        return 1
    return 0
