"""The export's rules on a run written straight to the real S3 (no Kafka): dedupe (a completion
beats an error, then the earliest offset), missing ids against an input file, shards and their
checksums, the exit status, and an ``s3://`` destination. Also the sink's conditional create."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import msgspec
import pytest
import zstandard

from sinks.export import main
from sinks.layout import ObjectMeta, object_key
from sinks.s3 import Batch, ObjectStore, record_line
from streams.config import Settings
from streams.records import CompletionRecord, ErrorRecord, encode, key_of
from tests.sinks.support import client, completion

pytestmark = pytest.mark.s3


def _write(
    settings: Settings,
    topic: str,
    values: list[bytes],
    record_type: type[CompletionRecord] | type[ErrorRecord],
) -> None:
    """One object at partition 0, offsets 0.. in order, as the sink writes it."""
    batch = Batch(3)
    for offset, value in enumerate(values):
        record_id = msgspec.json.decode(value)["id"]
        line, ok = record_line(
            topic=topic,
            partition=0,
            offset=offset,
            timestamp_ms=1_700_000_000_000,
            key=key_of(record_id),
            value=value,
            record_type=record_type,
            run_id=settings.run_id,
        )
        assert ok
        batch.add(offset, line)
    body, meta = batch.seal()
    store = ObjectStore(client(settings), settings.s3.bucket, 1 << 30)
    assert store.put_once(object_key(settings.s3.prefix, settings.run_id, topic, 0, 0), body, meta).created


@pytest.fixture
def run(s3: str, settings: Settings, tmp_path: Path) -> Path:
    """A run: completions 0, 1, 2, 3 and a later duplicate of 1 (finish_reason length); dead letters
    for 2 (which also has a completion) and 5. The input file lists ids 0..6, so 4 and 6 are missing."""
    later_dup = msgspec.structs.replace(completion(1, settings.run_id), finish_reason="length")
    _write(
        settings,
        settings.topics.completions,
        [encode(completion(i, settings.run_id)) for i in range(4)] + [encode(later_dup)],
        CompletionRecord,
    )
    dead = [
        ErrorRecord(id=f"id-00000{i}", stage="generate", error_type="FatalRequestError", message="400")
        for i in (2, 5)
    ]
    _write(settings, settings.topics.errors, [encode(e) for e in dead], ErrorRecord)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(
        "".join(json.dumps({"id": f"id-{i:06d}", "prompt": f"q{i}"}) + "\n" for i in range(7)) + "\n"
    )
    return inputs


def _argv(settings: Settings, to: str, inputs: Path, *extra: str) -> list[str]:
    return [
        "--run",
        settings.run_id,
        "--to",
        to,
        "--input",
        str(inputs),
        "--s3.prefix",
        settings.s3.prefix,
        *extra,
    ]


def _lines(path: Path) -> list[bytes]:
    return zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read().splitlines()


def test_dedupe_missing_ids_shards_and_exit_status(
    settings: Settings, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dataset"
    assert main(_argv(settings, str(out), run, "--shard-records", "3")) == 1  # ids are missing
    assert "2 missing" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_id"] == settings.run_id and manifest["created_at"]
    assert manifest["records"] == {"ids": 5, "completions": 4, "errors": 1}
    assert manifest["duplicates"] == {"records_dropped": 2, "ids": 2, "completion_beat_error": 1}
    assert manifest["missing"] == {"count": 2, "ids": ["id-000004", "id-000006"], "truncated": False}
    assert manifest["expected"] == {"source": f"file:{run}", "ids": 7, "unreadable": 0}
    assert manifest["by_finish_reason"] == {"stop": 4}  # the later "length" duplicate lost
    assert manifest["by_quality_flag"] == {"degenerate": 1} and manifest["flagged_completions"] == 1
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

    assert main(_argv(settings, str(tmp_path / "again"), run, "--allow-missing")) == 0


def test_export_to_s3(settings: Settings, run: Path) -> None:
    dest_prefix = f"{settings.s3.prefix}-export"
    assert main(_argv(settings, f"s3://{settings.s3.bucket}/{dest_prefix}", run, "--allow-missing")) == 0
    s3 = client(settings)
    keys = sorted(
        o["Key"] for o in s3.list_objects_v2(Bucket=settings.s3.bucket, Prefix=dest_prefix + "/")["Contents"]
    )
    assert keys == [
        f"{dest_prefix}/{n}"
        for n in ("completions-00000.jsonl.zst", "errors-00000.jsonl.zst", "manifest.json")
    ]
    manifest = json.loads(
        s3.get_object(Bucket=settings.s3.bucket, Key=f"{dest_prefix}/manifest.json")["Body"].read()
    )
    assert manifest["records"]["completions"] == 4


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
