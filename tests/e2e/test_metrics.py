"""The metrics of every long-running process, against their documentation and the dashboard.

``docs/metrics.md`` lists every series (name, type, labels); ``docs/grafana/kafkagen.json`` is
built on them. The stack test runs a real producer, a generation consumer (on the SGLang-API
simulator) and the sink, each with ``--metrics-port``, scrapes each ``/metrics`` and checks that
every documented series of the process is there with its type and labels, and nothing else; the
dashboard tests check that every PromQL expression names only documented series (and, on the
stack, series the processes serve) and groups only by their labels.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from launch.run.job import RunOptions, metrics_port_args, producer_argv
from simulator import DEFAULT_PROFILE, SimulatedServer
from streams.config import Settings
from tests.consumers.support import wait_all_done
from tests.helpers import REPO_ROOT, spawn, unused_port, wait_for
from tests.sinks.support import sink_settings

DOC = REPO_ROOT / "docs" / "metrics.md"
DASHBOARD = REPO_ROOT / "docs" / "grafana" / "kafkagen.json"
PROCESSES = ("producer", "generate", "sink")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Series:
    """One documented series: its name as exposed (counters with ``_total``), type and labels."""

    name: str
    type: str
    labels: frozenset[str]

    @property
    def process(self) -> str:
        return self.name.split("_")[1]

    def sample_names(self) -> set[str]:
        """The sample names the series exposes (a histogram: its buckets, sum and count)."""
        if self.type == "histogram":
            return {self.name + s for s in HISTOGRAM_SUFFIXES}
        return {self.name}


def documented() -> dict[str, Series]:
    """The series tables of ``docs/metrics.md``, by name."""
    rows = re.findall(
        r"^\| `(kafkagen_\w+)` \| (counter|gauge|histogram) \| ([^|]+) \|", DOC.read_text(), re.M
    )
    series = {
        name: Series(name, kind, frozenset(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows
    }
    assert len(series) == len(rows), "a series is documented twice"
    return series


@dataclass(frozen=True)
class Sample:
    name: str
    type: str
    labels: frozenset[str]


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition, with its family's type and its label names."""
    return [
        Sample(s.name, family.type, frozenset(s.labels) - {"le"})
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def problems(process: str, text: str) -> list[str]:
    """What is wrong with ``process``'s scrape ``text`` against the documentation: a documented
    series missing or with another type or label set, or a series served but not documented."""
    docs = {n: s for n, s in documented().items() if s.process == process}
    by_sample = {name: s for s in docs.values() for name in s.sample_names()}
    samples = parse(text)
    found: list[str] = []
    for sample in samples:
        series = by_sample.get(sample.name)
        if series is None:
            found.append(f"{sample.name}: served but not in docs/metrics.md")
        elif sample.type != series.type or sample.labels != series.labels:
            wrong = f"{sample.type} {sorted(sample.labels)}"
            found.append(f"{sample.name}: {wrong}, documented {series.type} {sorted(series.labels)}")
    served = {s.name for s in samples}
    found += [f"{s.name}: documented, not served" for s in docs.values() if not s.sample_names() <= served]
    return found


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its query variables."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            exprs.append(query)
    return exprs


def expr_names(expr: str) -> set[str]:
    return set(re.findall(r"\bkafkagen_\w+", expr))


def series_of(sample_name: str, series: dict[str, Series]) -> Series | None:
    for s in series.values():
        if sample_name in s.sample_names():
            return s
    return None


def test_the_documentation_names_follow_the_scheme() -> None:
    series = documented()
    assert {s.process for s in series.values()} == set(PROCESSES)
    for s in series.values():
        assert re.fullmatch(r"kafkagen_(producer|generate|sink)_[a-z0-9_]+", s.name), s.name
        assert (s.type == "counter") == s.name.endswith("_total"), (
            f"{s.name}: counters and only they end in _total"
        )
        assert "run" in s.labels, f"{s.name}: no run label"
        if s.process == "generate":
            assert {"server", "instance"} <= s.labels, f"{s.name}: a consumer series without server, instance"


def test_the_dashboard_uses_only_documented_series_and_their_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["run"]["query"]["query"] == "label_values(kafkagen_generate_completions_total, run)"
    series = documented()
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        names = expr_names(expr)
        assert names, f"no kafkagen series in {expr}"
        used = [series_of(n, series) for n in names]
        assert None not in used, (
            f"{expr}: {sorted(n for n, u in zip(names, used, strict=True) if u is None)} not in docs"
        )
        labels = set().union(*(u.labels for u in used if u is not None))
        if any(n.endswith("_bucket") for n in names):
            labels.add("le")
        grouped = {g.strip() for group in re.findall(r"\bby \(([^)]*)\)", expr) for g in group.split(",")}
        matched = set(re.findall(r"(\w+)=~?\"", expr))
        assert grouped | matched <= labels, (
            f"{expr}: labels {sorted((grouped | matched) - labels)} not on its series"
        )
        for window in re.findall(r"\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", expr
    panels = {p["title"] for p in dashboard["panels"]}
    assert {"Output tokens/s per server", "Prompts lag per partition", "Sink lag per partition"} <= panels


def test_the_main_job_gives_each_process_its_metrics_port(tmp_path: Path) -> None:
    options = RunOptions(metrics_port=24600)
    argv = producer_argv(options, tmp_path / "bad.jsonl")
    assert argv[argv.index("--metrics-port") + 1] == "24600"
    assert metrics_port_args(options, 1) == ["--metrics-port", "24601"]  # the sink
    assert metrics_port_args(options, 2 + 3) == ["--metrics-port", "24605"]  # consumer 3
    assert metrics_port_args(RunOptions(), 1) == []
    assert "--metrics-port" not in producer_argv(RunOptions(), tmp_path / "bad.jsonl")


# -- on the stack ----------------------------------------------------------------------------------


def _input(path: Path, count: int) -> set[str]:
    """``count`` prompts, one bad line and one prompt longer than the simulator's context (a dead
    letter); returns the ids that end in Kafka."""
    lines = ['{"id": "broken", "prompt": ']  # first: counted before the first scrape
    lines += [json.dumps({"id": f"m-{i:03d}", "prompt": f"What is {i} + {i}?"}) for i in range(count)]
    lines.append(json.dumps({"id": "too-long", "prompt": "many words " * 20_000}))
    path.write_text("\n".join(lines) + "\n")
    return {f"m-{i:03d}" for i in range(count)} | {"too-long"}


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def _scrape(port: int) -> str | None:
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None


async def _complete_scrape(process: str, port: int, proc: subprocess.Popen[bytes], log: Path) -> str:
    """A scrape of ``process`` where every documented series is present (polled: per-partition
    series appear once partitions are assigned and fetched); fails with what is wrong."""
    last: list[str] = []

    async def complete() -> bool:
        assert proc.poll() is None, f"{process} exited ({proc.returncode}):\n{_tail(log)}"
        text = await _scrape(port)
        if text is None:
            return False
        last[:] = [text]
        return not problems(process, text)

    try:
        await wait_for(complete, timeout_s=90, what=f"every documented {process} series", interval_s=0.5)
    except AssertionError:
        if proc.poll() is not None:
            raise
        wrong = problems(process, last[0]) if last else ["no scrape answered"]
        raise AssertionError(f"{process} metrics:\n" + "\n".join(wrong)) from None
    return last[0]


def _values(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_every_process_serves_every_documented_series_with_its_labels(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    cfg = sink_settings(settings)
    consumer = cfg.consumer.model_copy(
        update={"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "commit_interval_s": 0.3}
    )
    producer = cfg.producer.model_copy(update={"max_records_per_s": 5.0, "checkpoint_interval_s": 1.0})
    generation = cfg.generation.model_copy(update={"max_tokens": 32})
    # 32 tokens with thinking on: every answer is cut, which the quality gate would rightly halt
    # (docs/gate.md); this test is about the series, so the gate only reports
    gate = cfg.gate.model_copy(update={"enabled": False})
    cfg = cfg.model_copy(
        update={"consumer": consumer, "producer": producer, "generation": generation, "gate": gate}
    )
    profile = replace(
        DEFAULT_PROFILE,
        max_running_requests=4,
        max_running_requests_set=True,
        context_length=4096,
        context_length_set=True,
        warmup_s=0.0,
    )
    ports = {p: unused_port() for p in PROCESSES}
    prompts = tmp_path / "prompts.jsonl"
    ids = _input(prompts, 60)
    async with SimulatedServer(profile, time_scale=20) as sim:
        gen_log, sink_log, prod_log = (tmp_path / f"{p}.log" for p in ("generate", "sink", "producer"))
        metrics = "--metrics-port"
        generate = spawn(
            [
                "-m",
                "consumers.generate",
                "--server",
                sim.url,
                "--instance-id",
                "m0",
                metrics,
                str(ports["generate"]),
            ],
            cfg,
            gen_log,
        )
        sink = spawn(["-m", "sinks.s3", metrics, str(ports["sink"])], cfg, sink_log)
        procs += [generate, sink]
        # 62 lines at 5 records/s: the producer publishes for ~12 s, committing every second
        produce = spawn(
            [
                "-m",
                "producers.prompts",
                str(prompts),
                "--id-field",
                "id",
                "--bad-lines",
                str(tmp_path / "bad.jsonl"),
                "--no-progress",
                metrics,
                str(ports["producer"]),
            ],
            cfg,
            prod_log,
        )
        procs.append(produce)
        scrapes = {"producer": await _complete_scrape("producer", ports["producer"], produce, prod_log)}
        assert await asyncio.to_thread(produce.wait, 120) == 1, _tail(prod_log)  # 1: a bad line
        await wait_all_done(cfg, ids, timeout_s=120)
        scrapes["generate"] = await _complete_scrape("generate", ports["generate"], generate, gen_log)
        scrapes["sink"] = await _complete_scrape("sink", ports["sink"], sink, sink_log)

    run = cfg.run_id
    for text in scrapes.values():
        for sample in text_string_to_metric_families(text):
            for s in sample.samples:
                assert s.labels["run"] == run, s
    # a few values, from what the test did
    assert _values(scrapes["producer"], "kafkagen_producer_bad_lines_total") == {(("run", run),): 1.0}
    assert len(_values(scrapes["producer"], "kafkagen_producer_records_total")) >= 2  # per partition
    gen = scrapes["generate"]
    assert sum(_values(gen, "kafkagen_generate_completions_total").values()) == len(ids) - 1
    assert sum(_values(gen, "kafkagen_generate_dead_letters_total").values()) == 1
    assert list(_values(gen, "kafkagen_generate_slots").values()) == [4.0]
    labels = dict(next(iter(_values(gen, "kafkagen_generate_in_flight"))))
    assert labels == {"run": run, "server": sim.url, "instance": "m0"}
    partitions = {dict(k)["partition"] for k in _values(gen, "kafkagen_generate_lag_records")}
    assert partitions == {"0", "1", "2"}
    committed = _values(scrapes["sink"], "kafkagen_sink_committed_offset")
    assert {dict(k)["topic"] for k in committed} == {cfg.topics.completions, cfg.topics.errors}

    # the dashboard's series are all served
    served = {s.name for text in scrapes.values() for s in parse(text)}
    for expr in dashboard_exprs():
        assert expr_names(expr) <= served, f"{expr}: {sorted(expr_names(expr) - served)} not served"

    for proc in (generate, sink):
        proc.terminate()
    assert [await asyncio.to_thread(p.wait, 60) for p in (generate, sink)] == [0, 0]
