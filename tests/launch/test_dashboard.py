"""The web dashboard (``kafkagen status --serve``, :mod:`launch.status.dashboard`).

The samples and their ring buffer (pure, milliseconds); the HTTP server in-process over a status
source of the test's own (its endpoints, a failing collection, the halted banner in Chromium);
and the issue's check: ``status --serve`` as a real process over a real pipeline (simulators,
consumers, sink, producer on the local Kafka and S3), opened in headless Chromium, whose numbers,
chart data and screenshot must show the live status.

Chromium is Debian's (``/usr/bin/chromium``, installed by ``scripts/setup-env.sh`` under
``scripts/test.sh``), driven by playwright; never ``playwright install`` (it downloads a browser).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from PIL import Image
from playwright.async_api import BrowserContext, Page, async_playwright

from launch.status.dashboard import STATIC, Dashboard, History, run_dashboard, sample_of
from launch.status.dashboard.backfill import align_published, samples_from_counts, topic_history
from streams.config import Settings
from streams.environment import settings_to_env
from streams.kafka import producer_kwargs
from streams.topics import ensure_topics, topic_specs
from tests.helpers import REPO_ROOT, spawn, start_simulator, unused_port, wait_for, with_kafka_at

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _status(
    at: float,
    n: int,
    *,
    state: str = "running",
    gate: dict[str, Any] | None = None,
    eta_per_prompt: float = 1 / 3,
) -> dict[str, Any]:
    """A status dict in the schema's shape (``kafkagen status --json``) after ``n`` results, with an
    ETA of ``eta_per_prompt`` seconds for each of the ``100 - n`` prompts left."""
    servers = [
        {
            "instance": f"gen-{i}",
            "server": f"http://127.0.0.1:{30000 + i}",
            "model": "sim",
            "host": "h",
            "state": "running",
            "server_up": True,
            "report_age_s": 0.5,
            "tokens_per_s": 100.0 + 10 * i + n,
            "completions_per_s": 1.0 + i,
            "completions": n,
            "errors": 0,
            "in_flight": 4,
            "window": 6,
            "running": 3 + i,
            "queued": 0,
            "slots": 8,
            "occupancy": (3 + i) / 8,
        }
        for i in range(2)
    ]
    return {
        "schema_version": 1,
        "run_id": "dash",
        "at": at,
        "state": state,
        "prompts": {
            "published": 100,
            "published_exact": True,
            "results": n,
            "completions": n - 1,
            "errors": 1,
            "in_s3": max(0, n - 5),
            "exported": None,
            "remaining": 100 - n,
        },
        "rates": {"completions_per_s": 3.0, "tokens_per_s": 210.0 + 2 * n},
        "eta_s": (100 - n) * eta_per_prompt,
        "eta_range_s": [0.8 * (100 - n) * eta_per_prompt, 1.25 * (100 - n) * eta_per_prompt],
        "projection": {
            "at": at,
            "results": n,
            "total": 100,
            "completions": n - 1,
            "output_tokens": {"value": 41_000.0, "low": 38_500.0, "high": 43_600.0},
            "gpu_hours": {"value": 1.5, "low": 1.2, "high": 1.8},
            "finish_at": {"value": at + 600, "low": at + 500, "high": at + 700},
            "servers": 2,
            "started_at": at - 60,
            "classes": {},
            "gpu_hours_so_far": 0.1,
            "replayed": {"summary": "projection at 1% of a replayed past run (P): finish +5%"},
        },
        "lag": {"total": 100 - n, "partitions": [], "consumers": [], "sink": {"lag": 5, "members": 1}},
        "servers": servers,
        "quality": {"results": n, "classes": {"truncated": n // 2, "error": 1}},
        "gate": gate or {"state": "running", "epoch": 0, "reason": "", "fix": "", "at": None, "breaches": []},
        "export": None,
    }


# --- samples and history (pure) ---------------------------------------------------------------


def test_a_sample_keeps_what_the_charts_plot() -> None:
    sample = sample_of(_status(1000.0, 40))
    assert sample["at"] == 1000.0 and sample["state"] == "running" and sample["gate"] == "running"
    assert (sample["published"], sample["results"], sample["in_s3"], sample["exported"]) == (
        100,
        40,
        35,
        None,
    )
    assert sample["tokens_per_s"] == 290.0 and sample["completions_per_s"] == 3.0
    assert (sample["lag"], sample["sink_lag"], sample["eta_s"]) == (60, 5, 20.0)
    assert sample["quality"] == {"truncated": 20, "error": 1} and sample["quality_results"] == 40
    assert sample["servers"]["gen-1"] == {
        "tokens_per_s": 150.0,
        "completions_per_s": 2.0,
        "running": 4,
        "slots": 8,
        "queued": 0,
        "occupancy": 0.5,
        "state": "running",
    }


def test_a_sample_of_a_run_not_found_has_nones_not_errors() -> None:
    sample = sample_of({"schema_version": 1, "run_id": "x", "at": 5, "state": "not_found"})
    assert sample["state"] == "not_found" and sample["published"] is None and sample["servers"] == {}
    assert sample["lag"] is None and sample["sink_lag"] is None and sample["quality"] == {}
    with pytest.raises(ValueError, match="'at' is None"):
        sample_of({"state": "running"})


def test_history_keeps_the_last_history_s_seconds_in_order() -> None:
    history = History(history_s=10.0, interval_s=1.0)
    for t in range(30):
        assert history.add({"at": float(t)})
    assert not history.add({"at": 29.0}), "the same status twice is one sample"
    assert [s["at"] for s in history.since()] == [float(t) for t in range(19, 30)]
    assert [s["at"] for s in history.since(27.0)] == [28.0, 29.0]
    history.add({"at": 100.0})  # after a pause, the old samples are out of the window
    assert [s["at"] for s in history.since()] == [100.0]
    with pytest.raises(ValueError, match="must be > 0"):
        History(interval_s=0)


def test_the_past_goes_before_the_collected_samples_whatever_its_age() -> None:
    history = History(history_s=10.0, interval_s=1.0)
    assert history.add({"at": 100.0}) and history.add({"at": 101.0})
    # 0 records before 50 s, then 10 prompts and 5 results by 60 s, 10 results by 100.5 s
    past = samples_from_counts([50_000, 60_000, 100_500], [(0, 0, 0), (10, 4, 1), (10, 9, 1)])
    assert [(s["published"], s["results"], s["remaining"]) for s in past] == [
        (0, 0, 0),
        (10, 5, 5),
        (10, 10, 0),
    ]
    assert [s["completions_per_s"] for s in past] == [None, 0.5, 0.123]
    assert {s["source"] for s in past} == {"topics"} and past[1]["in_s3"] is None
    # 11 offsets for 10 prompts (a transaction marker): scaled to the exact count, the last at 10
    aligned = align_published(samples_from_counts([0, 1000], [(0, 0, 0), (11, 2, 0)]), 10)
    assert [(s["published"], s["remaining"]) for s in aligned] == [(0, 0), (10, 8)]
    assert align_published(past, 12) == past, "fewer offsets than prompts: nothing to scale"
    history.seed(past)
    assert history.seeded == 2, "a sample of the past newer than the first collected one is dropped"
    assert [s["at"] for s in history.since()] == [50.0, 60.0, 100.0, 101.0]
    assert [s["at"] for s in history.since(55.0)] == [60.0, 100.0, 101.0]
    history.add({"at": 200.0})  # the collected samples keep history_s, the past stays
    assert [s["at"] for s in history.since()] == [50.0, 60.0, 200.0]


async def test_the_past_is_read_back_from_the_topics_record_timestamps(
    kafka: str, settings: Settings
) -> None:
    """Records planted with known timestamps on the run's topics (several partitions): the counts
    before each sampled time are those of the records older than it, whatever the partition."""
    specs = topic_specs(settings)
    assert await topic_history(settings, until_ms=2_000_000_000_000) == [], "no topics yet: no past"
    await ensure_topics(settings, [specs["prompts"], specs["completions"], specs["errors"]])
    t0 = 1_700_000_000_000
    planted = {  # topic -> the records' timestamps (ms after t0)
        specs["prompts"].name: [0, 0, 500, 1000, 1000, 1500, 2000, 2000, 2500, 3000],
        specs["completions"].name: [4000, 4500, 5000, 6000, 7000, 8000, 9000, 9000],
        specs["errors"].name: [6500, 9500],
    }
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for topic, times in planted.items():
            for i, ms in enumerate(times):
                await producer.send_and_wait(topic, b"x", key=str(i).encode(), timestamp_ms=t0 + ms)
    finally:
        await producer.stop()
    past = await topic_history(settings, until_ms=t0 + 60_000)
    assert past[0]["at"] == t0 / 1000 and past[-1]["at"] > (t0 + 9500) / 1000, [s["at"] for s in past]
    for sample in past:
        ms = round(sample["at"] * 1000) - t0
        expect = [
            sum(1 for x in planted[specs[k].name] if x < ms) for k in ("prompts", "completions", "errors")
        ]
        assert [sample["published"], sample["completions"], sample["errors"]] == expect, (ms, sample)
    assert past[-1]["results"] == 10 and past[-1]["published"] == 10 and past[-1]["remaining"] == 0
    assert max(s["completions_per_s"] or 0 for s in past) > 0


# --- the server in-process, over the test's own status source ---------------------------------


class Source:
    """Statuses after 10, 20, 30 ... results, one per call; fails while ``failing`` is set."""

    def __init__(self, **status: Any) -> None:
        self.calls = 0
        self.failing: str | None = None
        self.status = status

    async def __call__(self) -> dict[str, Any]:
        if self.failing:
            raise ConnectionError(self.failing)
        self.calls += 1
        return _status(time.time(), min(100, 10 * self.calls), **self.status)


@contextlib.asynccontextmanager
async def serving(source: Source, interval_s: float = 0.3) -> AsyncIterator[str]:
    """The dashboard over ``source`` on a free port of 127.0.0.1; yields its URL."""
    stop, lines = asyncio.Event(), list[str]()
    port = unused_port()
    task = asyncio.create_task(
        run_dashboard(
            Dashboard(source, interval_s=interval_s), "127.0.0.1", port, echo=lines.append, stop=stop
        )
    )
    await wait_for(lambda: lines or task.done(), timeout_s=10, what="the dashboard to listen")
    if task.done():
        task.result()
    assert lines == [f"dashboard: http://127.0.0.1:{port}/ (refreshes every {interval_s:g} s; Ctrl-C stops)"]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop.set()
        await task


async def test_endpoints_serve_the_page_its_assets_the_latest_status_and_the_history() -> None:
    source = Source()
    async with serving(source) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        page = await http.get("/")
        assert page.status_code == 200 and 'src="static/uPlot.iife.min.js"' in page.text
        for name in ("uPlot.iife.min.js", "uPlot.min.css", "dashboard.js", "dashboard.css", "LICENSE.uPlot"):
            asset = await http.get(f"/static/{name}")
            assert asset.status_code == 200 and asset.content == (STATIC / name).read_bytes(), name
        assert "http" not in (STATIC / "index.html").read_text().split("<body>")[0].replace("http-equiv", "")
        await wait_for(lambda: source.calls >= 4, timeout_s=20, what="four collections")
        history = (await http.get("/api/history")).json()
        assert history["interval_s"] == 0.3 and history["error"] is None
        samples = history["samples"]
        assert len(samples) >= 4 and [s["results"] for s in samples[:4]] == [10, 20, 30, 40]
        since = (await http.get("/api/history", params={"since": samples[1]["at"]})).json()["samples"]
        assert [s["at"] for s in since[:2]] == [samples[2]["at"], samples[3]["at"]]
        status = (await http.get("/api/status")).json()
        assert status["schema_version"] == 1 and status["prompts"]["results"] >= 40
        assert (await http.get("/api/history", params={"since": "x"})).status_code == 400


async def test_a_failing_collection_is_reported_and_the_last_status_kept() -> None:
    source = Source()
    source.failing = "Kafka at 127.0.0.1:1 is unreachable"
    async with serving(source) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        first = await http.get("/api/status")
        assert first.status_code == 503 and first.json() == {"error": "Kafka at 127.0.0.1:1 is unreachable"}
        source.failing = None
        await wait_for(lambda: source.calls >= 2, timeout_s=20, what="collections that work")
        assert (await http.get("/api/history")).json()["error"] is None
        source.failing = "Kafka went away"

        async def failed() -> bool:
            return bool((await http.get("/api/history")).json()["error"] == "Kafka went away")

        await wait_for(failed, timeout_s=20, what="the failure to show")
        assert len((await http.get("/api/history")).json()["samples"]) >= 2
        status = await http.get("/api/status")
        assert status.status_code == 200 and status.json()["prompts"]["results"] >= 20


# --- Chromium ---------------------------------------------------------------------------------


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; a failure (not a skip) when it is missing: CI must run the browser tests."""
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: as root, apt-get update && apt-get install -y chromium "
        "(scripts/setup-env.sh does it when KAFKAGEN_WITH_BROWSER=1, as scripts/test.sh sets)"
    )
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path, tmp_path: Path) -> AsyncIterator[BrowserContext]:
    """Headless Debian Chromium with a new empty profile, viewport 1280x1400 at scale 1."""
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(chromium),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1400},
            device_scale_factor=1,
        )
        try:
            yield context
        finally:
            await context.close()


async def open_dashboard(context: BrowserContext, url: str, errors: list[str]) -> Page:
    page = await context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    await page.goto(url)
    return page


async def test_a_halted_run_shows_a_red_banner_with_reason_and_fix(
    browser: BrowserContext, tmp_path: Path
) -> None:
    gate: dict[str, Any] = {
        "state": "halted",
        "epoch": 0,
        "reason": "93% of the first 55 results have empty content: reasoning ate the budget",
        "fix": "raise --max-tokens (now 512) or turn thinking off",
        "at": time.time(),
        "breaches": [
            {
                "cls": "empty_content",
                "count": 51,
                "results": 55,
                "share": 0.93,
                "threshold": 0.25,
                "phase": "warmup",
            }
        ],
    }
    errors: list[str] = []
    async with serving(Source(state="halted", gate=gate)) as url:
        page = await open_dashboard(browser, url, errors)
        banner = page.locator("#gate-banner")
        await banner.wait_for(state="visible", timeout=15_000)
        text = await banner.inner_text()
        assert gate["reason"] in text and gate["fix"] in text, text
        assert "empty_content: 51 of 55 results (93%, limit 25%, warmup)" in text
        assert await page.locator("#state").inner_text() == "halted"
        await page.screenshot(path=str(tmp_path / "halted.png"))
    with Image.open(tmp_path / "halted.png") as shot:  # the banner's red (#c62828) fills its box
        red = _pixels(shot, None, (0xC6, 0x28, 0x28))
    assert red > 20_000, f"{red} red pixels: the banner is not drawn"
    assert not errors, errors


async def test_the_eta_and_the_projection_show_their_intervals(browser: BrowserContext) -> None:
    """The ETA card shows the status' ``eta_range_s`` under the ETA, and the projection card the
    projected output tokens, GPU-hours and finish, each with its 95% interval (issues 29 and 30)."""
    errors: list[str] = []
    async with serving(Source(eta_per_prompt=20.0)) as url:
        page = await open_dashboard(browser, url, errors)
        await page.wait_for_function(
            "() => document.querySelector('[data-field=\"eta_range_s\"]').textContent.includes('–')",
            timeout=30_000,
        )
        fields = (await _page_data(page))["fields"]
    # after n results: ETA (100 - n) * 20 s, its interval 0.8x - 1.25x
    eta = float(fields["eta_s"]["value"])
    low, high = json.loads(fields["eta_range_s"]["value"])
    assert (low, high) == pytest.approx((0.8 * eta, 1.25 * eta))
    assert re.fullmatch(r"\d+m \d\ds – \d+m \d\ds", fields["eta_range_s"]["text"]), fields["eta_range_s"]
    assert fields["projection.output_tokens"]["text"] == "41,000 (38,500 – 43,600)"
    assert fields["projection.gpu_hours"]["text"] == "1.5 (1.2 – 1.8)"
    # and how close the projection came on a replayed past run (launch/status/calibration.py)
    replayed = fields["projection.replayed.summary"]["text"]
    assert replayed == "projection at 1% of a replayed past run (P): finish +5%"
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d \(\d\d:\d\d:\d\d – \d\d:\d\d:\d\d\)", fields["projection.finish_at"]["text"]
    )
    assert not errors, errors


@pytest.mark.parametrize("eta_per_prompt", [0.02, 20.0], ids=["eta-2s", "eta-33m"])
async def test_chart_ticks_read_as_counts_and_durations_at_both_widths(
    browser: BrowserContext, tmp_path: Path, eta_per_prompt: float
) -> None:
    """ETAs of 1.8 s down to 0 (uPlot's own steps rounded to "1s 1s 1s 0s") and of 33 minutes (its
    label "33m 20s" cut to "33m 20" by a fixed-width axis); counts of 0 or 1 (steps of 0.2 prompts)."""
    errors: list[str] = []
    shots = tmp_path / "screenshots"
    shots.mkdir()
    async with serving(Source(eta_per_prompt=eta_per_prompt)) as url:
        page = await open_dashboard(browser, url, errors)
        await page.wait_for_function("() => window.kafkagenDashboard.history.length >= 8", timeout=30_000)
        await _check_layout(page, f"eta-{eta_per_prompt:g}", shots)
    assert not errors, errors


def _pixels(
    shot: Image.Image,
    box: tuple[int, int, int, int] | None,
    colour: tuple[int, int, int],
    tolerance: int = 60,
) -> int:
    """Pixels of ``shot`` (within ``box``: left, top, right, bottom) within ``tolerance`` (sum of the
    channel differences) of ``colour``: anti-aliased strokes are close to their colour, not on it."""
    area = (shot.crop(box) if box else shot).convert("RGB")
    colours: list[tuple[int, Any]] = area.getcolors(area.width * area.height) or []
    return sum(
        n for n, rgb in colours if sum(abs(a - b) for a, b in zip(rgb, colour, strict=True)) <= tolerance
    )


# --- the check: status --serve over a real pipeline, in Chromium -----------------------

PROMPTS = 160
MODEL = "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"
WIDTHS = (1280, 1920)
GSM8K = REPO_ROOT / "data" / "gsm8k" / "test.jsonl"


def _simulator(log: Path) -> tuple[subprocess.Popen[str], str]:
    """``python -m simulator`` on a free port, 4 slots, at 5 times real time: the process and its URL."""
    # a served model name as long as real ones: the servers table must still fit the page
    args = ("--time-scale", "5", "--max-running-requests", "4", "--served-model-name", MODEL)
    return start_simulator(log, *args)


class Pipeline:
    """The test's processes (simulators, consumers, sink, producer, the dashboard); all stopped at
    the end, and a failure shows the end of the log of any that exited on its own."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.one_shot: set[str] = set()
        self.stopped: set[str] = set()

    def add(self, name: str, proc: subprocess.Popen[Any], *, one_shot: bool = False) -> None:
        """Track ``proc`` (``one_shot``: it may end, with status 0: the producer)."""
        self.procs[name] = proc
        if one_shot:
            self.one_shot.add(name)

    def assert_alive(self) -> None:
        for name, proc in self.procs.items():
            if name in self.stopped:
                continue
            if proc.poll() is not None and not (name in self.one_shot and proc.returncode == 0):
                log = self.logs / f"{name}.log"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
                raise AssertionError(f"{name} exited with {proc.returncode}; end of {log}:\n{tail}")

    def stop(self, *names: str) -> None:
        """Stop the processes ``names`` (none: all of them): SIGTERM, then SIGKILL after 15 s."""
        procs = [p for n, p in self.procs.items() if not names or n in names]
        self.stopped.update(names or self.procs)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path)
    yield p
    p.stop()


def _prompts(path: Path, count: int) -> Path:
    path.write_text("".join(line + "\n" for line in GSM8K.read_text().splitlines()[:count]))
    return path


async def _page_data(page: Page) -> dict[str, Any]:
    data: dict[str, Any] = await page.evaluate(
        """() => {
          const d = window.kafkagenDashboard;
          const fields = {};
          for (const el of document.querySelectorAll("[data-field]")) {
            fields[el.dataset.field] = {value: el.dataset.value, text: el.textContent};
          }
          return {latest: d.latest, history: d.history, charts: d.charts, error: d.error,
                  updates: d.updates, fields};
        }"""
    )
    return data


async def _serve(pipeline: Pipeline, settings: Settings, name: str = "dashboard") -> str:
    """``kafkagen status --serve`` (a new status every second) as process ``name``; its URL once
    ``/api/status`` answers."""
    port = unused_port()
    serve = ["-m", "launch.cli", "status", "--serve", "--port", str(port), "--interval", "1"]
    pipeline.add(name, spawn(serve, settings, pipeline.logs / f"{name}.log"))
    url = f"http://127.0.0.1:{port}/"
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:

        async def listening() -> bool:
            pipeline.assert_alive()
            with contextlib.suppress(httpx.TransportError):
                return (await http.get("/api/status")).status_code == 200
            return False

        await wait_for(listening, timeout_s=30, what=f"the dashboard on {url}")
    return url


async def _start_pipeline(pipeline: Pipeline, settings: Settings, count: int) -> str:
    """Two simulators with a consumer each, the sink, the producer of ``count`` GSM8K questions and
    ``kafkagen status --serve`` (a new status every second); returns the dashboard's URL once it
    answers."""
    logs = pipeline.logs
    for i in range(2):
        proc, server = _simulator(logs / f"sim-{i}.log")
        pipeline.add(f"sim-{i}", proc)
        generate = ["-m", "consumers.generate", "--server", server, "--instance-id", f"gen-{i}"]
        pipeline.add(f"gen-{i}", spawn(generate, settings, logs / f"gen-{i}.log"))
    pipeline.add("sink", spawn(["-m", "sinks.s3"], settings, logs / "sink.log"))
    prompts = _prompts(logs / "gsm8k.jsonl", count)
    produce = ["-m", "producers.prompts", str(prompts), "--prompt-field", "question"]
    produce += ["--bad-lines", str(logs / "bad.jsonl")]
    pipeline.add("produce", spawn(produce, settings, logs / "produce.log"), one_shot=True)
    return await _serve(pipeline, settings)


_COUNT = re.compile(r"-?\d{1,3}(,\d{3})*")  # the count axes: whole numbers, "12,000"
_DURATION = re.compile(r"0|(\d+h)?( ?\d+m)?( ?\d+s)?")  # the ETA axis: "45s", "33m", "1h 30m"


async def _check_layout(page: Page, phase: str, shots: Path) -> None:
    """At each of WIDTHS: the page has no horizontal scrollbar, every chart's tick labels are
    distinct and fit their axis, counts and durations read as such; a screenshot of each
    (``shots/<phase>-<width>.png``)."""
    for width in WIDTHS:
        before = await page.evaluate("() => window.kafkagenDashboard.updates")
        await page.set_viewport_size({"width": width, "height": 1400})
        # a refresh after the resize: the charts are drawn at the new width
        await page.wait_for_function(f"() => window.kafkagenDashboard.updates > {before} + 1")
        await page.screenshot(path=str(shots / f"{phase}-{width}.png"), full_page=True)
        scroll = await page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert scroll[0] <= scroll[1], f"{phase} at {width} px: the page scrolls sideways {scroll}"
        charts = (await _page_data(page))["charts"]
        for name, chart in charts.items():
            axes = chart.get("axes") or []
            assert len(axes) >= 2, (
                f"{phase} at {width} px: chart {name} shows no axes' labels: {chart.keys()}"
            )
            for axis in axes:
                labels = [t for t in axis["labels"] if t]
                where = f"{phase} at {width} px, chart {name}, axis {axis['scale']}: {labels}"
                assert labels and len(set(labels)) == len(labels), f"tick labels repeat: {where}"
                if axis["side"] in (1, 3):  # the y axes, left and right
                    assert max(axis["widths"]) <= axis["room"], f"labels wider than the axis {axis}: {where}"
                if axis["scale"] == "s":
                    assert all(_DURATION.fullmatch(t) for t in labels), f"not durations: {where}"
                elif axis["scale"] == "y" and name in ("lag", "progress", "quality"):
                    assert all(_COUNT.fullmatch(t) for t in labels), f"not counts: {where}"


@pytest.mark.timeout(240)
async def test_status_serve_shows_the_live_numbers_of_a_running_pipeline_in_chromium(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, pipeline: Pipeline, browser: BrowserContext
) -> None:
    # thinking off and room for the simulator's answers (median 300 tokens): a healthy run, which the
    # quality gate lets finish
    generation = settings.generation.with_budget(max_tokens=1024, thinking=False)
    url = await _start_pipeline(pipeline, settings.model_copy(update={"generation": generation}), PROMPTS)
    errors: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        page = await open_dashboard(browser, url, errors)

        async def generating() -> bool:  # results arrive and the page has drawn several samples
            pipeline.assert_alive()
            data = await _page_data(page)
            latest = data["latest"] or {}
            results = [s["results"] or 0 for s in data["history"]]
            both = [s for s in data["history"] if len(s["servers"]) == 2]  # each consumer has reported
            return len(both) >= 3 and len(latest.get("servers") or []) == 2 and len(set(results)) >= 3

        await wait_for(generating, timeout_s=60, what="the page to show results growing", interval_s=0.5)
        shots = tmp_path / "screenshots"
        shots.mkdir()
        await _check_layout(page, "live", shots)
        await page.set_viewport_size({"width": 1280, "height": 1400})
        # The page's numbers are the API's: the same status (same "at") as /api/status gives.
        # (the page polls every interval: wait until it has the status the API answered just now)
        seen_at = []
        for _ in range(15):
            api = (await http.get("/api/status")).json()
            for _ in range(50):
                data = await _page_data(page)
                if data["latest"]["at"] >= api["at"]:
                    break
                await asyncio.sleep(0.1)
            seen_at.append((api["at"], data["latest"]["at"]))
            if data["latest"]["at"] == api["at"]:
                break
        assert data["latest"] == api, f"the page shows the status /api/status answers (at: {seen_at})"
        assert data["error"] is None and not errors, (data["error"], errors)
        fields = data["fields"]
        for path in ("prompts.published", "prompts.results", "prompts.in_s3", "lag.total"):
            value = _get(api, path)
            assert fields[path]["value"] == str(value), (path, fields[path], value)
            assert fields[path]["text"].replace(",", "") == str(value), (path, fields[path])
        assert fields["prompts.exported"]["text"] == "—" and fields["state"]["text"] == api["state"]
        rows = await page.locator("#servers tbody tr").count()
        assert rows == len(api["servers"]) == 2, "one row per consumer"
        # The charts got the history's samples, value for value.
        history = (await http.get("/api/history")).json()["samples"]
        by_time = {s["at"]: s for s in history}
        charts = data["charts"]
        for name, chart in charts.items():
            xs = chart["data"][0]
            assert len(xs) > 1 and all(len(ys) == len(xs) for ys in chart["data"][1:]), name
        progress = charts["progress"]
        assert [s["label"] for s in progress["series"]] == ["published", "results", "in S3"]
        for x, published, results, in_s3 in zip(*progress["data"], strict=True):
            if x in by_time:
                assert (published, results, in_s3) == (
                    by_time[x]["published"],
                    by_time[x]["results"],
                    by_time[x]["in_s3"],
                )
        # Over the collected samples (those read back from the topics say nothing of S3): results
        # may pass published (a rebalance's bounded duplicates: the newcomer regenerates the prompts
        # revoked in flight), but never go back, and S3 never holds more than the results topics do.
        collected = [
            i for i, x in enumerate(progress["data"][0]) if by_time.get(x, {}).get("source") == "status"
        ]
        assert len(collected) >= 3, progress["data"]
        results_seen = [progress["data"][2][i] for i in collected]
        in_s3_seen = [progress["data"][3][i] for i in collected]
        assert results_seen == sorted(results_seen) and in_s3_seen == sorted(in_s3_seen), progress["data"]
        assert all(s <= r for s, r in zip(in_s3_seen, results_seen, strict=True)), progress["data"]
        tokens = charts["tokens"]
        assert [s["label"] for s in tokens["series"]] == ["gen-0", "gen-1", "total"]
        assert max(v or 0 for v in tokens["data"][3]) > 0, "tokens were generated"
        for x, gen0, gen1, total in zip(*tokens["data"], strict=True):
            if x in by_time:
                servers = by_time[x]["servers"]
                assert total == by_time[x]["tokens_per_s"], x
                assert gen0 == servers.get("gen-0", {}).get("tokens_per_s"), x
                assert gen1 == servers.get("gen-1", {}).get("tokens_per_s"), x
        occupancy = charts["occupancy"]
        assert [s["label"] for s in occupancy["series"]] == ["gen-0", "gen-1"]
        for x, *percent in zip(*occupancy["data"], strict=True):
            if x in by_time:
                servers = by_time[x]["servers"]
                shares = [servers.get(n, {}).get("occupancy") for n in ("gen-0", "gen-1")]
                assert percent == [None if v is None else v * 100 for v in shares], x
        # From the screenshot: every chart's plot area has its series drawn, in their colours.
        shot_path = tmp_path / "dashboard.png"
        await page.screenshot(path=str(shot_path), full_page=True)
        with Image.open(shot_path) as shot:
            for name, chart in charts.items():
                box = await page.locator(f"#chart-{name} canvas").bounding_box()
                assert box is not None, name
                area = (
                    int(box["x"]),
                    int(box["y"]),
                    int(box["x"] + box["width"]),
                    int(box["y"] + box["height"]),
                )
                drawn = {
                    s["label"]: _pixels(shot, area, _rgb(s["color"]))
                    for s in _visible_series(chart["series"], chart["data"][1:])
                }
                # a healthy run may have no quality class yet: then that chart has no series
                empty = name == "quality" and not any(s["quality"] for s in data["history"])
                assert (drawn or empty) and all(n >= 10 for n in drawn.values()), (name, drawn, shot_path)

        async def all_in_s3() -> bool:  # and at the end the page shows the whole run
            # (results may pass the prompts: a prompt generated twice around a rebalance, README)
            status = seen["prompts"] = (await _page_data(page))["latest"]["prompts"]
            done = status["results"] >= status["published"] == PROMPTS and status["remaining"] == 0
            return bool(done and status["in_s3"] == status["results"])

        seen: dict[str, Any] = {}
        try:
            await wait_for(all_in_s3, timeout_s=60, what=f"the page to show all {PROMPTS} prompts in S3")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the page's last counts: {seen}") from None
    assert not errors, errors
    await _check_finished(pipeline, settings, browser, shots)


async def _check_finished(
    pipeline: Pipeline, settings: Settings, browser: BrowserContext, shots: Path
) -> None:
    """The run finished and its consumers gone: a dashboard started now shows the run's history
    (read back from its topics), the consumers' lag as done, and fits both widths."""
    pipeline.stop("gen-0", "gen-1", "sink", "dashboard")
    started = time.time()
    url = await _serve(pipeline, settings, "dashboard-after")
    errors: list[str] = []
    page = await open_dashboard(browser, url, errors)
    await page.wait_for_function(
        "() => { const d = window.kafkagenDashboard;"
        " return d.latest && d.latest.state === 'done' && d.history.length >= 2 && d.updates >= 2; }",
        timeout=60_000,
    )
    await _check_layout(page, "finished", shots)
    data = await _page_data(page)
    xs, published, results, _ = data["charts"]["progress"]["data"]
    past = [p for x, p in zip(xs, published, strict=True) if x < started and p is not None]
    assert past and max(past) == PROMPTS, f"published before the dashboard (markers not counted): {past}"
    assert xs[0] < started - 5, f"the charts start at {xs[0]}, when the dashboard did ({started}): no history"
    run = [r for x, r in zip(xs, results, strict=True) if x < started and r is not None]
    assert run and run[0] < PROMPTS / 4 and run[-1] >= PROMPTS, f"results before the dashboard: {run}"
    rates = [
        v for x, v in zip(xs, data["charts"]["completions"]["data"][-1], strict=True) if x < started and v
    ]
    assert rates and max(rates) > 0, "the completions/s of the run, before the dashboard started"
    lags = await page.locator("#consumers tbody td[data-col=lag]").evaluate_all(
        "tds => tds.map(td => td.dataset.value)"
    )
    note = await page.locator("#consumers-note").inner_text()
    members = await page.locator("#consumers tbody tr[data-member]").count()
    assert lags and all(v == "0" for v in lags), f"lag per consumer when done: {lags} ({note!r})"
    assert members or note.startswith("done: no consumer left"), note
    assert "remaining" in await page.locator("#definitions").inner_text()
    assert not errors, errors


def _get(data: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


def _visible_series(series: list[dict[str, Any]], values: list[list[float | None]]) -> list[dict[str, Any]]:
    """The series a reader must see: those with a segment (two adjacent points) that no series drawn
    after it on the same scale covers with the same two values (four quality classes all at 12, or
    a server idle at 0 under another one, lie under the later line)."""
    shown = []
    for i, (s, ys) in enumerate(zip(series, values, strict=True)):
        later = [v for t, v in zip(series[i + 1 :], values[i + 1 :], strict=True) if t["scale"] == s["scale"]]
        segments = [k for k in range(len(ys) - 1) if ys[k] is not None and ys[k + 1] is not None]
        if any(all(v[k : k + 2] != ys[k : k + 2] for v in later) for k in segments):
            shown.append(s)
    return shown


def _rgb(colour: str) -> tuple[int, int, int]:
    """``#rrggbb`` as a tuple."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


async def test_status_serve_without_kafka_says_so_and_stops_cleanly(
    settings: Settings, tmp_path: Path
) -> None:
    """``status --serve`` against a Kafka that does not answer: the page's data says why, a second
    one on the same port exits 2 naming the address, SIGTERM stops the first with status 0."""
    settings = with_kafka_at(settings, f"127.0.0.1:{unused_port()}")
    port = unused_port()
    serve = ["-m", "launch.cli", "status", "--serve", "--port", str(port), "--interval", "0.5"]
    proc = spawn(serve, settings, tmp_path / "dashboard.log")
    env = {**os.environ, **settings_to_env(settings)}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=40) as http:

            async def failing() -> bool:
                assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
                with contextlib.suppress(httpx.TransportError):
                    return bool((await http.get("/api/history")).json()["error"])
                return False

            await wait_for(failing, timeout_s=40, what="the dashboard to report the failed collection")
            status = await http.get("/api/status")
            assert status.status_code == 503 and status.json()["error"], status.text
        again = await asyncio.create_subprocess_exec(
            sys.executable, *serve, cwd=REPO_ROOT, env=env, stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(again.communicate(), 60)
        assert again.returncode == 2, stderr
        assert f"dashboard address 127.0.0.1:{port} is in use: choose another with --port" in stderr.decode()
        proc.terminate()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    log = (tmp_path / "dashboard.log").read_text()
    assert f"dashboard: http://127.0.0.1:{port}/" in log, log
    assert f"collecting the status failed: Kafka at {settings.kafka.bootstrap_servers}: " in log, log
    assert "Traceback" not in log, log


@pytest.mark.timeout(150)
async def test_status_serve_shows_the_gate_halting_a_run_in_a_red_banner(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, pipeline: Pipeline, browser: BrowserContext
) -> None:
    """The issue's bad run in small: thinking on and a budget the reasoning eats (the simulator's
    reasoning runs to ~1,800 tokens). The consumers' quality gate halts the run; the page says so in
    red, with the gate's own reason and fix, as ``/api/status`` has them."""
    generation = settings.generation.with_budget(max_tokens=128, thinking=True)
    url = await _start_pipeline(pipeline, settings.model_copy(update={"generation": generation}), PROMPTS)
    errors: list[str] = []
    page = await open_dashboard(browser, url, errors)
    banner = page.locator("#gate-banner")
    await banner.wait_for(state="visible", timeout=60_000)
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        gate = (await http.get("/api/status")).json()["gate"]
    assert gate["state"] == "halted" and gate["reason"] and gate["fix"], gate
    text = await banner.inner_text()
    assert gate["reason"] in text and gate["fix"] in text, (text, gate)
    assert all(f"{b['cls']}: " in text for b in gate["breaches"]), (text, gate)
    assert await page.locator("#state").inner_text() == "halted"
    await page.screenshot(path=str(tmp_path / "halted.png"))
    with Image.open(tmp_path / "halted.png") as shot:
        box = await banner.bounding_box()
        assert box is not None
        area = (int(box["x"]), int(box["y"]), int(box["x"] + box["width"]), int(box["y"] + box["height"]))
        red = _pixels(shot, area, (0xC6, 0x28, 0x28))
    assert red > box["width"] * box["height"] / 2, f"{red} red pixels: the banner is not drawn"
    assert not errors, errors
