"""``python -m sinks.s3`` as a subprocess against the real Kafka and SeaweedFS: SIGKILLs at
deterministic points, racing writers, an S3 outage, the idle tail, a corrupt record, an emptied or
moved destination (S3 wins over the committed offset), permanent S3 errors (a foreign object at
the sink's key, a wrong key pair) and a Kafka outage (status, metrics, rate-limited logs).

Every test of the data path checks the guarantee itself: per partition the objects cover every offset exactly
once (metadata start/end, line offsets, SHA-256) and the export yields exactly the produced ids.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from launch.stack import LocalStack
from sinks.layout import decode_line, object_key, run_prefix
from sinks.topics import group_id
from streams.config import Settings
from streams.environment import settings_to_env
from streams.kafka import KAFKA_STEP_S, end_offsets
from streams.records import ErrorRecord, decode, encode, key_of
from tests.helpers import holds, metric_value, partition_leader, port_free, unused_port, with_kafka_at
from tests.sinks.support import (
    REPO_ROOT,
    SinkProcess,
    assert_exact_coverage,
    client,
    committed,
    completion,
    create_topics,
    produce,
    produce_run,
    sink_settings,
    sink_until_written,
    stored_objects,
    wait_all_written,
)

pytestmark = [pytest.mark.kafka, pytest.mark.s3]

N = 900


def run_export(settings: Settings, dest: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """``python -m sinks.export --run-id <run> --to <dest>`` with ``settings``; (status, manifest, stdout)."""
    env = {**os.environ, **settings_to_env(settings)}
    proc = subprocess.run(
        [sys.executable, "-m", "sinks.export", "--run-id", settings.run_id, "--to", str(dest), *extra],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    manifest_path = dest / "manifest.json"
    assert manifest_path.exists(), proc.stdout + proc.stderr
    return proc.returncode, json.loads(manifest_path.read_text()), proc.stdout


def snapshot(settings: Settings) -> dict[str, str]:
    """key → ETag of every object of the run's completions folder."""
    return {o.key: o.etag for o in stored_objects(settings, settings.topics.completions, read=False)}


def dangling_uploads(settings: Settings) -> list[str]:
    resp = client(settings).list_multipart_uploads(
        Bucket=settings.s3.bucket, Prefix=run_prefix(settings.s3.prefix, settings.run_id)
    )
    return [u["Key"] for u in resp.get("Uploads", [])]


def assert_export_is_exact(settings: Settings, dest: Path, n: int) -> dict[str, Any]:
    status, manifest, out = run_export(settings, dest)
    assert status == 0, out
    assert manifest["records"] == {"ids": n, "completions": n, "reused": 0, "errors": 0}
    assert manifest["missing"]["count"] == 0 and manifest["unexpected"]["count"] == 0
    assert manifest["duplicates"]["records_dropped"] == 0
    assert manifest["source"]["offset_overlaps"] == [] and manifest["source"]["offset_gaps"] == []
    assert sum(s["records"] for s in manifest["shards"] if s["kind"] == "completions") == n
    return manifest


@pytest.mark.parametrize(
    ("brokers", "pause", "sink"),
    [
        pytest.param(1, "mid_batch:2", {}, id="mid-batch"),
        pytest.param(1, "during_upload:2", {"multipart_threshold_bytes": 1}, id="during-multipart-upload"),
        pytest.param(1, "after_upload:2", {}, id="between-upload-and-commit"),
        # the commit after the upload, on a replicated __consumer_offsets
        pytest.param(3, "after_upload:2", {}, id="between-upload-and-commit-3brokers"),
    ],
)
async def test_sigkill_then_restart_covers_every_offset_exactly_once(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, pause: str, sink: dict[str, object]
) -> None:
    cfg = sink_settings(settings, **sink)
    await create_topics(cfg)
    await produce_run(cfg, range(N))
    ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    log = tmp_path / "sink.log"

    first = SinkProcess(cfg, log, pause=pause)
    try:
        marker = await first.wait_paused(timeout_s=60)
    finally:
        first.kill()
    before = snapshot(cfg)
    commits = await committed(cfg, cfg.topics.completions)
    key_match = re.search(r"key=(\S+)", marker)
    if pause.startswith("during_upload"):
        assert key_match is not None
        assert key_match[1] not in before, "a half-done multipart upload must not be visible"
        assert key_match[1] in dangling_uploads(cfg)
    if pause.startswith("after_upload"):
        assert key_match is not None
        assert key_match[1] in before, "the object was uploaded before the kill"
        obj = next(o for o in stored_objects(cfg, cfg.topics.completions) if o.key == key_match[1])
        assert (commits[obj.partition] or 0) <= obj.meta.start_offset, "its offsets were not committed"

    second = await sink_until_written(cfg, log, ends, timeout_s=90)
    objects = stored_objects(cfg, cfg.topics.completions)
    assert_exact_coverage(objects, ends)
    after = {o.key: o.etag for o in objects}
    assert {k: after.get(k) for k in before} == before, "objects written before the kill were never rewritten"
    assert dangling_uploads(cfg) == []
    assert "already exists" not in second.output(), "the restart resumed from S3, not by colliding"
    if pause.startswith("after_upload"):
        assert key_match is not None
        obj = next(o for o in objects if o.key == key_match[1])
        assert f"at offset {obj.meta.end_offset + 1} (S3 next {obj.meta.end_offset + 1}" in second.output()
    assert_export_is_exact(cfg, tmp_path / "export", N)


@pytest.mark.parametrize("brokers", [pytest.param(3, id="3brokers")])
async def test_a_broker_and_the_sink_killed_together_lose_and_repeat_nothing(
    kafka_cluster_stack: LocalStack, s3: str, settings: Settings, tmp_path: Path
) -> None:
    """On 3 brokers, the sink is SIGKILLed between an upload and its commit while the leader of
    the partition it was writing is SIGKILLed too. A new sink runs on the two brokers left (3
    replicas, min ISR 2), the broker comes back under it, and every offset lands in exactly one
    object, the ones written before the kills never rewritten."""
    cfg = sink_settings(settings)
    await create_topics(cfg)
    await produce_run(cfg, range(N))
    ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    log = tmp_path / "sink.log"
    first = SinkProcess(cfg, log, pause="after_upload:2")
    try:
        marker = await first.wait_paused(timeout_s=60)
    finally:
        first.kill()
    key_match = re.search(r"key=(\S+)", marker)
    assert key_match is not None
    paused = next(o for o in stored_objects(cfg, cfg.topics.completions, read=False) if o.key == key_match[1])
    leader = await partition_leader(cfg, cfg.topics.completions, paused.partition)
    victim = f"kafka-{leader}"
    assert kafka_cluster_stack.kill(victim)
    before = snapshot(cfg)
    try:
        second = SinkProcess(cfg, log)
        try:
            # Everything produced so far, on two brokers; then the broker comes back mid-run.
            await wait_all_written(cfg, second, cfg.topics.completions, ends, timeout_s=120)
        except BaseException:
            second.kill()
            raise
    finally:
        await asyncio.to_thread(kafka_cluster_stack.up, [victim])
    try:
        await produce_run(cfg, range(N, N + 300), prompts=False)
        ends = await end_offsets(cfg.kafka, cfg.topics.completions)
        await wait_all_written(cfg, second, cfg.topics.completions, ends, timeout_s=120)
        assert second.stop() == 0
    finally:
        second.kill()
    objects = stored_objects(cfg, cfg.topics.completions)
    assert_exact_coverage(objects, ends)
    after = {o.key: o.etag for o in objects}
    assert {k: after.get(k) for k in before} == before, (
        "objects written before the kills were never rewritten"
    )
    assert "already exists" not in second.output(), "the restart resumed from S3, not by colliding"


async def test_two_writers_racing_on_one_folder_never_overlap(
    kafka: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    """Two sinks in different groups write the same run folder with different batch sizes: the
    conditional create makes every start offset a single object and the loser skips past it."""
    cfg_a = sink_settings(settings, flush_records=100, instance_id="sink-a")
    cfg_b = sink_settings(
        settings, flush_records=70, instance_id="sink-b", group=f"{settings.sink.group}-rival"
    )
    assert group_id(cfg_a) != group_id(cfg_b)
    await create_topics(cfg_a)
    a = SinkProcess(cfg_a, tmp_path / "a.log")
    b = SinkProcess(cfg_b, tmp_path / "b.log")
    try:
        for proc in (a, b):
            await proc.wait_for_log("recovered", count=6, timeout_s=60)
        await produce_run(cfg_a, range(600))
        ends = await end_offsets(cfg_a.kafka, cfg_a.topics.completions)
        await wait_all_written(cfg_a, a, cfg_a.topics.completions, ends, timeout_s=90)
        await wait_all_written(cfg_b, b, cfg_b.topics.completions, ends, timeout_s=90)
        assert a.stop() == 0 and b.stop() == 0
    finally:
        a.kill()
        b.kill()
    assert_exact_coverage(stored_objects(cfg_a, cfg_a.topics.completions), ends)
    assert "already exists" in a.output() + b.output(), "the writers did collide at least once"
    assert_export_is_exact(cfg_a, tmp_path / "export", 600)


@pytest.fixture
def own_s3(settings: Settings, tmp_path: Path) -> Iterator[LocalStack]:
    """A SeaweedFS of this test's own (own home, own ports), so stopping it disturbs nobody."""
    for _ in range(50):
        port = random.randrange(21000, 26000)
        internal = (port, port + 1000, port + 1007, port + 555)
        if all(port_free(p) and port_free(p + 10000) for p in internal):
            break
    else:
        pytest.fail("no free ports for an own S3")
    own = settings.model_copy(
        update={
            "s3": settings.s3.model_copy(update={"endpoint_url": f"http://127.0.0.1:{port}"}),
            "home": str(tmp_path / "stack"),
        }
    )
    stack = LocalStack(own)
    stack.up(["s3"])
    try:
        yield stack
    finally:
        stack.down(["s3"])


async def test_s3_down_for_30_s_loses_nothing(
    kafka: str, settings: Settings, own_s3: LocalStack, tmp_path: Path
) -> None:
    cfg = sink_settings(own_s3.settings, retry_max_s=2.0)
    await create_topics(cfg)
    await produce_run(cfg, range(300))
    first_ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    sink = SinkProcess(cfg, tmp_path / "sink.log")
    try:
        await wait_all_written(cfg, sink, cfg.topics.completions, first_ends, timeout_s=60)
        down_at = time.monotonic()
        own_s3.processes.stop("s3")
        await produce_run(cfg, range(300, 600))
        ends = await end_offsets(cfg.kafka, cfg.topics.completions)
        await sink.wait_for_log("failed (attempt 2)", timeout_s=30)

        async def waits_for_s3() -> bool:
            assert sink.proc.poll() is None, "the sink must wait for S3, not exit"
            return await committed(cfg, cfg.topics.completions) == first_ends

        await holds(
            waits_for_s3, for_s=30 - (time.monotonic() - down_at), what="nothing committed without S3"
        )
        own_s3.up(["s3"])
        await wait_all_written(cfg, sink, cfg.topics.completions, ends, timeout_s=90)
        assert sink.stop() == 0
    finally:
        sink.kill()
    assert_exact_coverage(stored_objects(cfg, cfg.topics.completions), ends)
    assert_export_is_exact(cfg, tmp_path / "export", 600)


async def test_the_tail_is_flushed_after_the_idle_timeout_and_a_restart_writes_nothing(
    kafka: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    idle = 2.0
    cfg = sink_settings(settings, idle_flush_s=idle, flush_records=100)
    await create_topics(cfg)
    log = tmp_path / "sink.log"
    sink = SinkProcess(cfg, log)
    try:
        await sink.wait_for_log("recovered", count=6, timeout_s=60)
        await produce_run(cfg, range(7))
        produced_at = time.monotonic()
        ends = await end_offsets(cfg.kafka, cfg.topics.completions)
        # Only the idle timer writes a tail of 7 < flush_records: no upper bound on a busy machine is
        # needed to tell it worked, only that it did not fire before the silence lasted `idle`.
        await wait_all_written(cfg, sink, cfg.topics.completions, ends, timeout_s=idle + 30)
        elapsed = time.monotonic() - produced_at
        assert elapsed >= idle * 0.9, f"tail written {elapsed:.1f} s after the last record"
        assert sink.stop() == 0
    finally:
        sink.kill()
    written = snapshot(cfg)
    assert_exact_coverage(stored_objects(cfg, cfg.topics.completions), ends)

    again = SinkProcess(cfg, log)
    try:
        await again.wait_for_log("recovered", count=6, timeout_s=60)
        await holds(lambda: snapshot(cfg) == written, for_s=idle * 2 + 1, what="a restart writing nothing")
        assert again.stop() == 0
    finally:
        again.kill()
    assert snapshot(cfg) == written
    assert "wrote " not in again.output()
    assert_export_is_exact(cfg, tmp_path / "export", 7)


async def test_a_corrupt_record_is_reported_with_its_offset_and_the_rest_is_written(
    kafka: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    cfg = sink_settings(settings)
    await create_topics(cfg)
    await produce_run(cfg, range(40))
    bad = {
        b"\xff\xfe garbage {": await produce(
            cfg, cfg.topics.completions, [(b"bad-1", b"\xff\xfe garbage {")], partition=0
        ),
        b'{"id": "x"}': await produce(cfg, cfg.topics.completions, [(b"bad-2", b'{"id": "x"}')], partition=1),
    }
    await produce_run(cfg, range(40, 80))
    ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    sink = SinkProcess(cfg, tmp_path / "sink.log")
    try:
        await wait_all_written(cfg, sink, cfg.topics.completions, ends, timeout_s=60)
        assert sink.stop() == 0
    finally:
        sink.kill()
    objects = stored_objects(cfg, cfg.topics.completions)
    assert_exact_coverage(objects, ends)
    errors = {}
    for obj in objects:
        for raw, kind in zip(obj.lines, obj.kinds, strict=True):
            if kind == "undecodable":
                line = decode_line(raw)
                errors[(line.partition, line.offset)] = (line, decode(bytes(line.value), ErrorRecord))
    assert len(errors) == 2 and sum(kind == "completion" for o in objects for kind in o.kinds) == 80
    for value, [(partition, offset)] in bad.items():
        line, error = errors[(partition, offset)]
        assert error.source is not None and (error.source.partition, error.source.offset) == (
            partition,
            offset,
        )
        assert error.stage == "sink" and "not a valid CompletionRecord" in error.message
        assert line.raw_b64 is not None and base64.b64decode(line.raw_b64) == value

    status, manifest, out = run_export(cfg, tmp_path / "export")
    assert status == 0, out
    assert manifest["records"] == {"ids": 82, "completions": 80, "reused": 0, "errors": 2}
    assert manifest["source"]["lines_by_kind"] == {"completion": 80, "undecodable": 2}
    assert manifest["errors_by_type"] == {"sink:RecordDecodeError": 2}
    assert manifest["missing"]["count"] == 0 and manifest["unexpected"]["ids"] == ["bad-1", "bad-2"]


def test_unreachable_kafka_at_start_is_one_clear_line_and_exit_3(settings: Settings, tmp_path: Path) -> None:
    sink = SinkProcess(sink_settings(with_kafka_at(settings, "127.0.0.1:1")), tmp_path / "sink.log")
    assert sink.proc.wait(timeout=120) == 3
    output = sink.output()
    assert "error: Kafka at 127.0.0.1:1: KafkaConnectionError" in output
    assert "Traceback" not in output


async def test_kafka_lost_after_the_start_check_ends_the_sink_with_one_clear_line_and_exit_3(
    own_kafka: LocalStack, own_s3: LocalStack, tmp_path: Path
) -> None:
    """Kafka answers the command's start check, then goes while the sink waits for S3 at start
    (a schedule of the fault audit): the sink ends as when Kafka is unreachable at start (exit 3,
    one line naming Kafka), not with a crash report and status 1."""
    both = own_kafka.settings.model_copy(update={"s3": own_s3.settings.s3})
    cfg = sink_settings(both)
    await create_topics(cfg)
    own_s3.processes.stop("s3")
    sink = SinkProcess(cfg, tmp_path / "sink.log")
    try:
        await sink.wait_for_log("failed (attempt 2)", timeout_s=60)  # past the check, waiting for S3
        assert own_kafka.processes.stop("kafka")
        await asyncio.to_thread(own_s3.up, ["s3"])
        status = await asyncio.to_thread(sink.proc.wait, 120)
    finally:
        sink.kill()
    output = sink.output()
    assert status == 3, output[-3000:]
    assert f"Kafka at {cfg.kafka.bootstrap_servers}: KafkaConnectionError" in output
    assert "Traceback" not in output and "crash" not in output, output[-3000:]


async def test_a_sigterm_while_kafka_is_down_stops_the_sink_in_time_and_loses_nothing(
    own_kafka: LocalStack, s3: str, tmp_path: Path
) -> None:
    """An object uploaded while Kafka is down cannot be committed: SIGTERM then still stops the
    sink within ``shutdown_deadline_s`` plus one bounded commit and one bounded close, with status 0,
    and a sink started once Kafka is back writes nothing twice and nothing less."""
    cfg = sink_settings(own_kafka.settings, idle_flush_s=6.0)
    await create_topics(cfg)
    await produce_run(cfg, range(450))  # about 150 a partition: a full object of 100, a tail
    ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    full = sum(end // cfg.sink.flush_records for end in ends.values())
    tails = sum(1 for end in ends.values() if end % cfg.sink.flush_records)
    log = tmp_path / "sink.log"
    sink = SinkProcess(cfg, log)
    try:
        await sink.wait_for_log("wrote ", count=full, timeout_s=60)  # the tails are fetched by now
        assert own_kafka.processes.stop("kafka")
        try:
            await sink.wait_for_log("wrote ", count=full + tails, timeout_s=60)  # idle-flushed tails
            stopped_at = time.monotonic()
            status = await asyncio.to_thread(sink.stop, 60)
            took = time.monotonic() - stopped_at
        finally:
            await asyncio.to_thread(own_kafka.up, ["kafka"])
    finally:
        sink.kill()
    assert status == 0, sink.output()[-3000:]
    bound = cfg.sink.shutdown_deadline_s + 2 * KAFKA_STEP_S + 5
    assert took < bound, f"SIGTERM took {took:.0f} s with Kafka down (bound {bound:.0f} s)"
    assert await committed(cfg, cfg.topics.completions) != ends, "the tails' commits never reached Kafka"
    again = await sink_until_written(cfg, log, ends, timeout_s=120)
    assert_exact_coverage(stored_objects(cfg, cfg.topics.completions), ends)
    assert "already exists" not in again.output(), "the restart resumed from S3, not by colliding"


def _delete_run_folder(settings: Settings) -> int:
    s3 = client(settings)
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=settings.s3.bucket, Prefix=run_prefix(settings.s3.prefix, settings.run_id)
        )
        for o in page.get("Contents", [])
    ]
    for key in keys:
        s3.delete_object(Bucket=settings.s3.bucket, Key=key)
    return len(keys)


@pytest.mark.parametrize("change", ["folder-deleted", "prefix-changed"])
async def test_an_emptied_or_changed_destination_is_written_again(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, change: str
) -> None:
    """The group's committed offsets are at the end, but the destination holds nothing: S3 wins,
    every record is written again, and the sink says why."""
    cfg = sink_settings(settings)
    await create_topics(cfg)
    await produce_run(cfg, range(300))
    ends = await end_offsets(cfg.kafka, cfg.topics.completions)
    log = tmp_path / "sink.log"
    await sink_until_written(cfg, log, ends, timeout_s=90)
    assert await committed(cfg, cfg.topics.completions) == ends
    if change == "folder-deleted":
        assert _delete_run_folder(cfg) > 0
        again_cfg = cfg
    else:
        again_cfg = cfg.model_copy(
            update={"s3": cfg.s3.model_copy(update={"prefix": f"{cfg.s3.prefix}-moved"})}
        )
    assert stored_objects(again_cfg, again_cfg.topics.completions, read=False) == []

    again = await sink_until_written(again_cfg, log, ends, timeout_s=90)
    assert_exact_coverage(stored_objects(again_cfg, again_cfg.topics.completions), ends)
    out = again.output()
    folder = run_prefix(again_cfg.s3.prefix, again_cfg.run_id)
    assert "S3 wins" in out and f"s3://{again_cfg.s3.bucket}/{folder}" in out and "holds no object" in out
    assert_export_is_exact(again_cfg, tmp_path / "export", 300)


async def test_a_foreign_object_at_the_sinks_key_stops_it_with_a_clear_error(
    kafka: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    """An object the sink did not write sits at the key of the sink's next object: a permanent
    error, not a retry loop. The sink exits 1 naming the key and what to do; nothing is committed."""
    cfg = sink_settings(settings)
    await create_topics(cfg)
    sink = SinkProcess(cfg, tmp_path / "sink.log")
    try:
        await sink.wait_for_log("recovered", count=6, timeout_s=60)
        key = object_key(cfg.s3.prefix, cfg.run_id, cfg.topics.completions, 0, 0)
        client(cfg).put_object(Bucket=cfg.s3.bucket, Key=key, Body=b"somebody else's notes\n")
        await produce(
            cfg,
            cfg.topics.completions,
            [(key_of(f"id-{i:06d}"), encode(completion(i, cfg.run_id))) for i in range(5)],
            partition=0,
        )
        status = sink.proc.wait(timeout=90)
    finally:
        sink.kill()
    out = sink.output()
    assert status == 1, out[-3000:]
    assert f"s3://{cfg.s3.bucket}/{key} exists but is not a sink object" in out
    assert "move it out of the run folder, then start the sink again" in out
    assert out.count("failed (attempt") == 0, "a permanent error is not retried"
    assert "Traceback" not in out and "ERROR" in out and "sink stopped: s3://" in out
    assert (await committed(cfg, cfg.topics.completions))[0] is None
    assert client(cfg).get_object(Bucket=cfg.s3.bucket, Key=key)["Body"].read() == b"somebody else's notes\n"


def test_a_wrong_s3_key_stops_the_sink_with_one_clear_line(
    kafka: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    s3_cfg = settings.s3.model_copy(update={"secret_access_key": SecretStr("not-the-secret")})
    cfg = sink_settings(settings).model_copy(update={"s3": s3_cfg})
    sink = SinkProcess(cfg, tmp_path / "sink.log")
    try:
        status = sink.proc.wait(timeout=120)
    finally:
        sink.kill()
    out = sink.output()
    assert status == 1, out[-3000:]
    assert f"sink stopped: S3 bucket {cfg.s3.bucket!r} at {cfg.s3.endpoint_url}: access denied" in out
    assert "Traceback" not in out and "failed (attempt" not in out


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return metric_value(text, name)


async def _wait_metric(sink: SinkProcess, port: int, name: str, value: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _metric(port, name) != value:
        assert sink.proc.poll() is None, sink.output()[-3000:]
        assert time.monotonic() < deadline, f"{name} never became {value}:\n{sink.output()[-3000:]}"
        await asyncio.sleep(0.5)


async def test_a_kafka_outage_shows_in_status_and_metrics_and_its_log_lines_are_rate_limited(
    own_kafka: LocalStack, s3: str, tmp_path: Path
) -> None:
    """Kafka (the test's own broker) stops for 25 s under a running sink: ``kafkagen_sink_kafka_up``
    drops to 0, the status line says UNREACHABLE, aiokafka's retries do not flood the log (about 100
    lines a second before), and once Kafka is back the sink says so and writes what arrives."""
    cfg = sink_settings(own_kafka.settings)
    await create_topics(cfg)
    port = unused_port()
    sink = SinkProcess(cfg, tmp_path / "sink.log", args=["--metrics-port", str(port)])
    try:
        await sink.wait_for_log("recovered", count=6, timeout_s=60)
        await _wait_metric(sink, port, "kafkagen_sink_kafka_up", 1.0, timeout_s=30)
        before = len(sink.output().splitlines())
        assert own_kafka.processes.stop("kafka")
        down_at = time.monotonic()
        try:
            await _wait_metric(sink, port, "kafkagen_sink_kafka_up", 0.0, timeout_s=30)
            await sink.wait_for_log("Kafka UNREACHABLE for", timeout_s=30)
            await holds(
                lambda: sink.proc.poll() is None,
                for_s=25 - (time.monotonic() - down_at),
                what="the sink waiting",
            )
            down_s = time.monotonic() - down_at
            during = sink.output().splitlines()[before:]
        finally:
            await asyncio.to_thread(own_kafka.up, ["kafka"])
        assert len(during) <= 20 + down_s, f"{len(during)} lines in {down_s:.0f} s:\n" + "\n".join(
            during[-40:]
        )
        assert any("held back" in line or "more like it" in line for line in during), "repeats were counted"
        await _wait_metric(sink, port, "kafkagen_sink_kafka_up", 1.0, timeout_s=90)
        await sink.wait_for_log("answers again after", timeout_s=30)
        await produce_run(cfg, range(50))
        ends = await end_offsets(cfg.kafka, cfg.topics.completions)
        await wait_all_written(cfg, sink, cfg.topics.completions, ends, timeout_s=120)
        assert sink.stop() == 0
    finally:
        sink.kill()
    assert_exact_coverage(stored_objects(cfg, cfg.topics.completions), ends)
