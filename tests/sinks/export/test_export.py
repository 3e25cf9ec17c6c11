"""The export's rules on runs written to the real Kafka and S3 as the sink writes them: dedupe
(the latest attempt, then a completion beats an error, then the earliest offset), prompt
conflicts, missing ids against input files read as the producer reads them, offset coverage
against the topics (transaction markers are not gaps), corrupt objects, shards and their
checksums, re-exports into the same folder, the exit status, and an ``s3://`` destination. Also
the sink's conditional create."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import zstandard
from aiokafka import AIOKafkaProducer

from sinks.export.cli import main
from sinks.export.destination import EXPORT_DIR
from sinks.layout import Line, ObjectMeta, encode_line, object_key
from sinks.store import ObjectStore
from streams.config import Settings
from streams.control import read_control
from streams.environment import settings_to_env
from streams.kafka import producer_kwargs
from streams.records import CompletionRecord, ErrorRecord, encode, key_of
from streams.runs import naming
from tests.sinks.export.support import export_argv, input_rows, produce_values
from tests.sinks.support import (
    REPO_ROOT,
    client,
    completion,
    write_objects,
)

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


def _cli(cfg: Settings, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m sinks.export`` in a subprocess (to see its stderr whole, tracebacks included)."""
    return subprocess.run(
        [sys.executable, "-m", "sinks.export", *argv],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_to_env(cfg)},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _amain(argv: list[str]) -> int:
    """:func:`sinks.export.main` off the event loop (it runs its own)."""
    return await asyncio.to_thread(main, argv)


def _lines(path: Path) -> list[bytes]:
    return zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read().splitlines()


def test_dedupe_missing_ids_shards_and_exit_status(
    cfg: Settings, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dataset"
    assert main(export_argv(cfg, str(out), run, "--shard-records", "3")) == 1  # ids are missing
    printed = capsys.readouterr().out
    assert "2 missing" in printed and "missing: id-000004, id-000006" in printed
    assert not out.exists(), "an incomplete run is not published (test_export_atomic.py)"
    # a failed export does not report itself on the run's control topic; a successful one does
    control = cfg.topics.model_copy(update={"control": naming.control_topic(cfg.run_id)})
    assert asyncio.run(read_control(cfg.model_copy(update={"topics": control}))).export is None

    assert main(export_argv(cfg, str(out), run, "--shard-records", "3", "--allow-missing")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_id"] == cfg.run_id and manifest["created_at"] and manifest["ok"] is True
    assert manifest["records"] == {"ids": 5, "completions": 4, "reused": 0, "errors": 1}
    assert manifest["duplicates"] == {
        "records_dropped": 2,
        "ids": 2,
        "completion_beat_error": 1,
        "older_attempts_dropped": 0,
        "superseded_records": 0,
    }
    assert manifest["by_attempt"] == {"0": 5}
    assert manifest["conflicts"]["count"] == 0
    assert manifest["source"]["offset_gaps"] == [] and manifest["source"]["coverage_problems"] == []
    assert manifest["missing"] == {"count": 2, "ids": ["id-000004", "id-000006"], "truncated": False}
    assert manifest["expected"] == {"source": f"file:{run}", "ids": 7, "unreadable": 0}
    assert manifest["by_finish_reason"] == {"stop": 4}  # the later "length" duplicate lost
    assert manifest["quality"] == {
        "results": 5,
        "classes": {"degenerate": 1, "error": 1, "repetition_loop": 1},
    }
    assert manifest["flagged_completions"] == 1
    expected_tokens = [completion(i, "r").usage for i in range(4)]
    assert manifest["tokens"] == {
        "prompt": sum(u.prompt_tokens for u in expected_tokens),
        "completion": sum(u.completion_tokens for u in expected_tokens),
        "reasoning": sum(u.reasoning_tokens for u in expected_tokens),
    }
    assert manifest["errors_by_type"] == {"generate:FatalRequestError": 1}

    shards = manifest["shards"]
    assert [(s["path"], s["records"]) for s in shards] == [
        ("completions-00000.jsonl.zst", 3),
        ("completions-00001.jsonl.zst", 1),
        ("errors-00000.jsonl.zst", 1),
    ]
    for shard in shards:
        assert hashlib.sha256((out / shard["path"]).read_bytes()).hexdigest() == shard["sha256"]
    completions = [
        msgspec.json.decode(line, type=CompletionRecord)
        for s in shards[:2]
        for line in _lines(out / s["path"])
    ]
    assert [c.id for c in completions] == [f"id-{i:06d}" for i in range(4)]
    assert all(c.finish_reason == "stop" for c in completions)  # id-000001: the earliest offset won
    errors = [msgspec.json.decode(line, type=ErrorRecord) for line in _lines(out / shards[2]["path"])]
    assert [e.id for e in errors] == ["id-000005"]  # id-000002's error lost to its completion

    report = asyncio.run(read_control(cfg.model_copy(update={"topics": control}))).export
    assert report is not None and report.run_id == cfg.run_id
    assert (report.ids, report.completions, report.errors, report.missing) == (5, 4, 1, 2)
    assert (report.duplicates_dropped, report.destination) == (2, str(out))


def test_without_to_a_run_is_exported_to_its_dataset_folder_under_home(
    cfg: Settings, run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``--to``: ``<home>/datasets/<run id>`` (``home`` relative to the working directory), as
    the main job exports; the run named with ``--run``, the old spelling of ``--run-id``."""
    argv = export_argv(cfg, "unused", run, "--allow-missing", "--home", "state")
    del argv[argv.index("--to") : argv.index("--to") + 2]
    argv[argv.index("--run-id")] = "--run"
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    dataset = tmp_path / "state" / "datasets" / cfg.run_id
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["run_id"] == cfg.run_id and manifest["records"]["ids"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.jsonl", "state"]
    control = cfg.topics.model_copy(update={"control": naming.control_topic(cfg.run_id)})
    report = asyncio.run(read_control(cfg.model_copy(update={"topics": control}))).export
    assert report is not None and report.destination == str(dataset)


def test_export_to_s3(cfg: Settings, run: Path) -> None:
    dest_prefix = f"{cfg.s3.prefix}-export"
    assert main(export_argv(cfg, f"s3://{cfg.s3.bucket}/{dest_prefix}", run, "--allow-missing")) == 0
    s3 = client(cfg)
    keys = sorted(
        o["Key"] for o in s3.list_objects_v2(Bucket=cfg.s3.bucket, Prefix=dest_prefix + "/")["Contents"]
    )
    folders = {k.split("/")[-2] for k in keys if k.count("/") > dest_prefix.count("/") + 1}
    assert len(folders) == 1 and EXPORT_DIR.match(next(iter(folders))), keys
    folder = next(iter(folders))
    shards = [f"{folder}/completions-00000.jsonl.zst", f"{folder}/errors-00000.jsonl.zst"]
    assert keys == [f"{dest_prefix}/{n}" for n in [*shards, "manifest.json"]]
    manifest = json.loads(
        s3.get_object(Bucket=cfg.s3.bucket, Key=f"{dest_prefix}/manifest.json")["Body"].read()
    )
    assert manifest["records"]["completions"] == 4
    assert sorted(s["path"] for s in manifest["shards"]) == shards  # the manifest names its shard set


async def test_the_latest_attempt_wins_and_a_prompt_conflict_fails_the_export(
    cfg: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """id 0: attempt 0 then a re-generated attempt 1 (later offset) → attempt 1 wins even though
    attempt 0 came first; id 1: a completion of attempt 0, then an error of attempt 1 → the error
    wins (the latest attempt first); id 2: two completions of different prompts → a conflict."""
    run_id = cfg.run_id
    first = completion(0, run_id)
    regenerated = msgspec.structs.replace(
        completion(0, run_id),
        attempt=1,
        prompt=msgspec.structs.replace(first.prompt, attempt=1, run_id="another-run"),
        finish_reason="length",
    )
    failed = ErrorRecord(
        id="id-000001",
        attempt=1,
        prompt=completion(1, run_id).prompt,
        stage="generate",
        error_type="FatalRequestError",
        message="400",
    )
    other_prompt = msgspec.structs.replace(
        completion(2, run_id).prompt, messages=[{"role": "user", "content": "something else entirely"}]
    )
    clash = msgspec.structs.replace(completion(2, run_id), prompt=other_prompt)
    await produce_values(
        cfg,
        cfg.topics.completions,
        [
            encode(first),
            encode(completion(1, run_id)),
            encode(regenerated),
            encode(completion(2, run_id)),
            encode(clash),
        ],
    )
    await produce_values(cfg, cfg.topics.errors, [encode(failed)])
    await write_objects(cfg, cfg.topics.completions, 0)
    await write_objects(cfg, cfg.topics.errors, 0, record_type=ErrorRecord)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(input_rows(range(3)))
    out = tmp_path / "dataset"

    assert await _amain(export_argv(cfg, str(out), inputs)) == 1  # the conflict is fatal
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ok"] is False and manifest["missing"]["count"] == 0
    completions = {
        c.id: c
        for s in manifest["shards"]
        if s["kind"] == "completions"
        for c in (msgspec.json.decode(line, type=CompletionRecord) for line in _lines(out / s["path"]))
    }
    errors = [
        msgspec.json.decode(line, type=ErrorRecord)
        for s in manifest["shards"]
        if s["kind"] == "errors"
        for line in _lines(out / s["path"])
    ]
    assert completions["id-000000"].attempt == 1 and completions["id-000000"].finish_reason == "length"
    assert "id-000001" not in completions and [(e.id, e.attempt) for e in errors] == [("id-000001", 1)]
    assert manifest["by_attempt"] == {"0": 1, "1": 2}
    assert manifest["duplicates"]["older_attempts_dropped"] == 2
    assert manifest["duplicates"]["superseded_records"] == 2, "id-000000's and id-000001's attempt 0"
    assert "2 records of 2 re-generated ids in another attempt than the one kept" in printed
    c = cfg.topics.completions
    assert manifest["conflicts"] == {
        "count": 1,
        "items": [
            {
                "id": "id-000002",
                "first": {"topic": c, "partition": 0, "offset": 3, "attempt": 0},
                "second": {"topic": c, "partition": 0, "offset": 4, "attempt": 0},
            }
        ],
        "truncated": False,
    }
    assert (
        f"CONFLICT: id 'id-000002': different prompts at {c}-0@3 (attempt 0) and {c}-0@4 (attempt 0)"
        in printed
    )


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("shape", ["gz", "zst", "glob", "s3", "s3-glob", "stdin"])
def test_input_is_read_as_the_producer_reads_it(
    cfg: Settings, run: Path, tmp_path: Path, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = run.read_bytes()
    half = rows.splitlines(keepends=True)
    given: str
    if shape == "gz":
        (tmp_path / "in.jsonl.gz").write_bytes(_gzip(rows))
        given = str(tmp_path / "in.jsonl.gz")
    elif shape == "zst":
        (tmp_path / "in.jsonl.zst").write_bytes(_zstd(rows))
        given = str(tmp_path / "in.jsonl.zst")
    elif shape == "glob":
        (tmp_path / "parts").mkdir()
        (tmp_path / "parts" / "a.jsonl").write_bytes(b"".join(half[:3]))
        (tmp_path / "parts" / "b.jsonl.gz").write_bytes(_gzip(b"".join(half[3:])))
        given = str(tmp_path / "parts" / "*")
    elif shape.startswith("s3"):
        s3 = client(cfg)
        s3.put_object(
            Bucket=cfg.s3.bucket, Key=f"{cfg.s3.prefix}-in/a.jsonl.zst", Body=_zstd(b"".join(half[:4]))
        )
        s3.put_object(Bucket=cfg.s3.bucket, Key=f"{cfg.s3.prefix}-in/b.jsonl", Body=b"".join(half[4:]))
        given = f"s3://{cfg.s3.bucket}/{cfg.s3.prefix}-in/" + ("*" if shape == "s3-glob" else "a.jsonl.zst")
    else:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_gzip(rows))))
        given = "-"
    out = tmp_path / "dataset"
    expected = 4 if shape == "s3" else 7  # a.jsonl.zst alone holds ids 0..3
    assert main(export_argv(cfg, str(out), given, "--allow-missing")) == 0  # 7: ids 4 and 6 are missing
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["expected"]["ids"] == expected and manifest["expected"]["unreadable"] == 0
    assert manifest["missing"]["ids"] == (["id-000004", "id-000006"] if expected == 7 else [])


def test_an_unreadable_input_is_a_clear_error(cfg: Settings, run: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "in.jsonl.gz"
    truncated.write_bytes(_gzip(run.read_bytes() * 50)[:-30])
    proc = _cli(cfg, export_argv(cfg, str(tmp_path / "dataset"), truncated))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: {truncated}: cannot be read after line" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_offsets_that_no_object_holds_fail_the_export(
    cfg: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every id is in S3 (partition 0 holds each record four times, offsets 10..19 are one full
    copy), but Kafka holds records before the first object, between two objects and after the
    last of partition 0, and partition 1 has records and no object at all."""
    values = [encode(completion(i, cfg.run_id)) for i in range(10)]
    await produce_values(cfg, cfg.topics.completions, values * 4, partition=0)
    await produce_values(cfg, cfg.topics.completions, values[:2], partition=1)
    await write_objects(cfg, cfg.topics.completions, 0, [(10, 19), (25, 29)])
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(input_rows(range(10)))
    out = tmp_path / "dataset"
    assert await _amain(export_argv(cfg, str(out), inputs)) == 1
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["missing"]["count"] == 0, "the ids alone would pass"
    c = cfg.topics.completions
    gaps = [
        (g["partition"], g["from"], g["to"], g["where"], g["first_record"])
        for g in manifest["source"]["offset_gaps"]
    ]
    assert gaps == [
        (0, 0, 9, "before the first object", 0),
        (0, 20, 24, "between objects", 20),
        (0, 30, 39, "after the last object", 30),
        (1, 0, 1, "no object", 0),
    ]
    assert f"OFFSET GAP: {c}-0 offsets 0..9 (before the first object): Kafka holds record 0" in printed
    assert f"OFFSET GAP: {c}-0 offsets 30..39 (after the last object)" in printed
    assert f"OFFSET GAP: {c}-1 offsets 0..1 (no object)" in printed


async def test_transaction_markers_and_aborted_records_are_not_gaps(cfg: Settings, tmp_path: Path) -> None:
    """A transactional writer (the completions topic has none today; the check must not depend on
    it): committed 0..4, marker 5, aborted 6..8, marker 9, committed 10..14, marker 15. The sink
    (read_committed) writes 0..4 and 10..14; the holes 5..9 and 15 hold no committed record."""
    producer = AIOKafkaProducer(**producer_kwargs(cfg.kafka), transactional_id=f"tx-{cfg.run_id}")
    await producer.start()
    try:
        for n, commit in ((0, True), (5, False), (10, True)):
            async with producer.transaction() if commit else _aborting(producer):
                for i in range(n, n + (5 if commit else 3)):
                    value = encode(completion(i, cfg.run_id))
                    await producer.send(cfg.topics.completions, value, key=key_of(f"id-{i:06d}"), partition=0)
    finally:
        await producer.stop()
    keys = await write_objects(cfg, cfg.topics.completions, 0, [(0, 4), (10, 14)])
    assert len(keys) == 2
    out = tmp_path / "dataset"
    assert (
        await _amain(export_argv(cfg, str(out), None, "--allow-missing", "--no-topic-check")) == 1
    )  # S3 alone: a hole
    assert await _amain(export_argv(cfg, str(out), None, "--allow-missing")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["offset_gaps"] == [] and manifest["records"]["completions"] == 10


class _aborting:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.flush()
        await self.producer.abort_transaction()


def _put_raw(cfg: Settings, partition: int, body: bytes, meta: ObjectMeta | None) -> str:
    key = object_key(cfg.s3.prefix, cfg.run_id, cfg.topics.completions, partition, 0)
    extra = {"Metadata": meta.to_s3()} if meta is not None else {}
    client(cfg).put_object(Bucket=cfg.s3.bucket, Key=key, Body=body, **extra)  # type: ignore[arg-type]
    return key


async def test_a_corrupt_object_is_reported_not_a_traceback(cfg: Settings, run: Path, tmp_path: Path) -> None:
    """Two corrupt objects whose metadata and checksum are right (partitions 1 and 2, one record
    each in Kafka): a line that is not a sink line, and a record without an id."""
    values = [encode(completion(i, cfg.run_id)) for i in range(10, 12)]
    await produce_values(cfg, cfg.topics.completions, values[:1], partition=1)
    await produce_values(cfg, cfg.topics.completions, values[1:], partition=2)
    not_a_line = b'{"hello": "world"}\n'
    no_id = encode_line(
        Line(
            topic=cfg.topics.completions,
            partition=2,
            offset=0,
            timestamp_ms=0,
            key=None,
            kind="completion",
            value=msgspec.Raw(b'{"no": "id"}'),
        )
    )
    keys = []
    for partition, line in ((1, not_a_line), (2, no_id)):
        meta = ObjectMeta(0, 0, 1, hashlib.sha256(line).hexdigest(), len(line))
        keys.append(_put_raw(cfg, partition, _zstd(line), meta))
    proc = await asyncio.to_thread(
        _cli, cfg, export_argv(cfg, str(tmp_path / "dataset"), run, "--allow-missing")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    bucket = cfg.s3.bucket
    assert f"CORRUPT object: s3://{bucket}/{keys[0]}: line 1: not a sink line" in proc.stdout
    assert f"CORRUPT object: s3://{bucket}/{keys[1]}: line 1: " in proc.stdout and "`id`" in proc.stdout
    manifest = json.loads((tmp_path / "dataset" / "manifest.json").read_text())
    assert [c["key"] for c in manifest["source"]["corrupt_objects"]] == keys
    assert manifest["records"]["completions"] == 4, "the good objects are still exported"


@pytest.mark.parametrize("where", ["local", "s3"])
def test_re_exporting_into_the_same_folder_leaves_no_stale_shard(
    cfg: Settings, run: Path, tmp_path: Path, where: str
) -> None:
    to = str(tmp_path / "dataset") if where == "local" else f"s3://{cfg.s3.bucket}/{cfg.s3.prefix}-export"

    def names() -> list[str]:
        if where == "local":
            return sorted(p.name for p in (tmp_path / "dataset").iterdir())
        resp = client(cfg).list_objects_v2(Bucket=cfg.s3.bucket, Prefix=f"{cfg.s3.prefix}-export/")
        return sorted(o["Key"].rsplit("/", 1)[1] for o in resp.get("Contents", []))

    assert main(export_argv(cfg, to, run, "--allow-missing", "--shard-records", "1")) == 0
    assert len(names()) == 6  # 4 + 1 shards and the manifest
    if where == "local":
        (tmp_path / "dataset" / "notes.txt").write_text("mine")  # not ours: kept
    assert main(export_argv(cfg, to, run, "--allow-missing", "--shard-records", "3")) == 0
    expected = [
        "completions-00000.jsonl.zst",
        "completions-00001.jsonl.zst",
        "errors-00000.jsonl.zst",
        "manifest.json",
    ]
    assert names() == sorted(expected + (["notes.txt"] if where == "local" else []))


@pytest.mark.parametrize("threshold", [1 << 30, 1], ids=["put", "multipart"])
def test_conditional_create_never_overwrites(s3: str, settings: Settings, threshold: int) -> None:
    store = ObjectStore(client(settings), settings.s3.bucket, threshold)
    key = object_key(settings.s3.prefix, settings.run_id, "t", 0, 10)
    body = os.urandom(6 * 1024 * 1024) if threshold == 1 else b"first"  # two parts of the multipart path
    meta = ObjectMeta(10, 19, 10, hashlib.sha256(body).hexdigest(), len(body))
    assert store.put_once(key, body, meta).created
    other = ObjectMeta(10, 14, 5, "0" * 64, 1)
    outcome = store.put_once(key, b"second", other)
    assert not outcome.created and outcome.meta == meta  # the existing object wins...
    assert (
        client(settings).get_object(Bucket=settings.s3.bucket, Key=key)["Body"].read() == body
    )  # ...untouched
    assert store.abort_uploads(f"{settings.s3.prefix}/") == 0  # a failed complete leaves no upload behind


async def test_a_record_of_another_run_in_the_folder_is_reported_and_fails_the_export(
    cfg: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's folder holds completions 0..2 of the run, and two records of another run (as when
    two runs shared a prompts topic, docs/runs.md): id 3, and a later attempt of id 1 that would
    win the dedupe if it counted. Both are left out, counted, printed, and fail the export."""
    run_id = cfg.run_id
    stray_new = completion(3, "another-run")
    stray_newer = msgspec.structs.replace(completion(1, "another-run"), attempt=1, finish_reason="length")
    await produce_values(
        cfg,
        cfg.topics.completions,
        [encode(completion(i, run_id)) for i in range(3)] + [encode(stray_new), encode(stray_newer)],
    )
    await write_objects(cfg, cfg.topics.completions, 0)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(input_rows(range(3)))
    out = tmp_path / "dataset"

    assert await _amain(export_argv(cfg, str(out), inputs)) == 1
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ok"] is False
    c = cfg.topics.completions
    assert manifest["foreign"] == {
        "count": 2,
        "by_run": {"another-run": 2},
        "items": [
            {"id": "id-000003", "run_id": "another-run", "kind": "completion"}
            | {"topic": c, "partition": 0, "offset": 3, "attempt": 0},
            {"id": "id-000001", "run_id": "another-run", "kind": "completion"}
            | {"topic": c, "partition": 0, "offset": 4, "attempt": 1},
        ],
        "truncated": False,
    }
    assert manifest["records"] == {"ids": 3, "completions": 3, "reused": 0, "errors": 0}
    assert manifest["unexpected"]["count"] == 0 and manifest["missing"]["count"] == 0
    assert manifest["duplicates"]["records_dropped"] == 0 and manifest["by_attempt"] == {"0": 3}
    assert manifest["source"]["lines"] == 5
    dataset = [
        msgspec.json.decode(line, type=CompletionRecord)
        for s in manifest["shards"]
        for line in _lines(out / s["path"])
    ]
    assert [(r.id, r.run_id, r.attempt) for r in dataset] == [(f"id-00000{i}", run_id, 0) for i in range(3)]
    assert (
        f"FOREIGN record: id 'id-000003' at {c}-0@3 (attempt 0): a completion of run another-run, "
        f"not run {run_id}" in printed
    )
    assert f"FOREIGN record: id 'id-000001' at {c}-0@4 (attempt 1)" in printed
