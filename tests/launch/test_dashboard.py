"""The web dashboard (``kafkagen status --serve``, :mod:`launch.dashboard`).

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
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from playwright.async_api import BrowserContext, Page, async_playwright

from launch.dashboard import STATIC, Dashboard, History, run_dashboard, sample_of
from tests.helpers import unused_port, wait_for

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
    at: float, n: int, *, state: str = "running", gate: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A status dict in the schema's shape (``kafkagen status --json``) after ``n`` results."""
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
        "eta_s": (100 - n) / 3.0,
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
