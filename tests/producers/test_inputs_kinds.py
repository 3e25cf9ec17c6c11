"""The producer against the real broker on the inputs people already have: the bundled ShareGPT
sample through ``kafkagen produce``, JSON arrays, Parquet files and folders; bad rows reported with
file and row; exactly once across a SIGKILL mid-array and mid-Parquet; changed inputs refused."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launch.cli import main as kafkagen
from streams.config import Settings
from streams.kafka import topic_partitions
from streams.records import PromptRecord, decode, key_of
from streams.topics import ensure_topics, topic_specs
from tests.producers.support import flags, read_all, run_cli, sigkill_mid_file

pytestmark = pytest.mark.kafka


async def prompts_on_topic(settings: Settings) -> list[PromptRecord]:
    records = await read_all(settings, settings.topics.prompts)
    for r in records:
        assert r.key == key_of(decode(r.value or b"", PromptRecord).id), "the Kafka key is the record id"
    return [decode(r.value or b"", PromptRecord) for r in records]


def chat_rows(n: int, prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}-{i:05d}", "messages": [{"role": "user", "content": f"Question {i}: {'x' * 200}?"}]}
        for i in range(n)
    ]


def write_parquet(path: Path, rows: list[dict[str, Any]], *, row_group_size: int | None = None) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)


async def test_the_bundled_sharegpt_sample_through_kafkagen_produce(
    kafka: str, settings: Settings, sample_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sample_data / "sharegpt" / "glaive_toolcall_en_demo.json"
    rc = await asyncio.to_thread(
        kafkagen, ["produce", str(path), "--bad-lines", str(tmp_path / "bad.jsonl"), *flags(settings)]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "producer: published 300, skipped 0 (already published by an earlier run), bad 0" in err
    got = sorted(await prompts_on_topic(settings), key=lambda r: r.metadata.line)
    source = json.loads(path.read_bytes())
    assert [r.metadata.line for r in got] == list(range(1, 301))
    calls = 0
    for record, row in zip(got, source, strict=True):
        assert record.id == f"glaive_toolcall_en_demo.json:{record.metadata.line}"
        turns = row["conversations"]
        assert record.metadata.extra == {"reference": turns[-1]["value"]}, "the old answer is the reference"
        assert len(record.messages) == len(turns) - 1 and record.messages[-1]["role"] != "assistant"
        defined = [f["name"] for f in json.loads(row["tools"])]
        assert [t["function"]["name"] for t in record.tools or []] == defined
        for i, (message, turn) in enumerate(zip(record.messages, turns, strict=False)):
            if turn["from"] == "function_call":
                calls += 1
                (call,) = message["tool_calls"]
                assert message["role"] == "assistant" and message["content"] is None
                assert call["id"] == f"call_{i}_0" and call["type"] == "function"
                assert call["function"]["name"] in defined
                assert json.loads(call["function"]["arguments"]) == json.loads(turn["value"])["arguments"]
                answer = record.messages[i + 1]
                assert answer == {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": turns[i + 1]["value"],
                }
    assert calls == 211


async def test_an_array_and_a_parquet_folder_with_bad_rows_then_a_rerun_skips_them(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    array = tmp_path / "talks.json"
    talks: list[Any] = [
        {"id": "t-1", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]},
        {"id": "t-2", "conversations": []},
        {"id": "t-3", "conversations": [{"from": "human", "value": "a"}, {"from": "robot", "value": "b"}]},
        {"id": "t-4", "conversations": [{"from": "human", "value": 42}]},
        {"id": "t-5", "conversations": [{"from": "gpt", "value": "only me"}]},
        {"id": "t-6", "conversations": [{"from": "human", "value": "Bye"}]},
    ]
    array.write_text(json.dumps(talks, indent=2))
    folder = tmp_path / "gsm"
    folder.mkdir()
    write_parquet(
        folder / "part-0.parquet", [{"question": "1+1?", "answer": "2"}, {"question": None, "answer": "x"}]
    )
    write_parquet(folder / "part-1.parquet", [{"question": 7, "answer": "7"}])  # an integer column
    write_parquet(folder / "part-2.parquet", [{"question": "2+2?", "answer": "4"}])

    rc, err = run_cli(settings, "talks.json", cwd=tmp_path)
    assert rc == 1, err
    rows = [json.loads(line) for line in (tmp_path / "bad-lines.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r.get("id")) for r in rows] == [
        ("talks.json", 2, "t-2"),
        ("talks.json", 3, "t-3"),
        ("talks.json", 4, "t-4"),
        ("talks.json", 5, "t-5"),
    ]
    reasons = [r["reason"] for r in rows]
    assert reasons[0] == "conversations is empty: at least one turn is needed"
    assert reasons[1].startswith("conversations[1].from is 'robot': unknown role")
    assert reasons[2] == "conversations[0].value is a number, expected a string"
    assert reasons[3] == "conversations has no human turn: there is no prompt to answer"
    assert "bad line talks.json:3: conversations[1].from is 'robot'" in err

    rc, err = run_cli(settings, "gsm", "--prompt-field", "question", "--keep-field", "answer", cwd=tmp_path)
    assert rc == 1, err
    rows = [json.loads(line) for line in (tmp_path / "bad-lines.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r["reason"]) for r in rows] == [
        ("gsm/part-0.parquet", 2, "question is null, expected a string"),
        ("gsm/part-1.parquet", 1, "question is a number, expected a string"),
    ]
    got = {r.id: r for r in await prompts_on_topic(settings)}
    assert sorted(got) == ["part-0.parquet:1", "part-2.parquet:1", "t-1", "t-6"]
    assert got["t-1"].messages == [{"role": "user", "content": "Hi"}]
    assert got["t-1"].metadata.extra == {"reference": "Yo"}
    assert got["part-2.parquet:1"].metadata.extra == {"answer": "4"}
    assert got["part-2.parquet:1"].metadata.source == "gsm/part-2.parquet"

    rc, err = run_cli(settings, "talks.json", "gsm", "--prompt-field", "question", cwd=tmp_path)
    assert rc == 2 and "with other mapping options" in err, "the array was published without --prompt-field"
    rc, err = run_cli(settings, "gsm", "--prompt-field", "question", "--keep-field", "answer", cwd=tmp_path)
    assert rc == 1, err
    assert "gsm/part-0.parquet: an earlier run published all its 2 records" in err
    assert "producer: published 0, skipped 2 (already published by an earlier run), bad 2" in err
    rc, err = run_cli(settings, "talks.json", "--last-turn", "keep", "--allow-bad", cwd=tmp_path)
    assert rc == 2 and "(last_turn: None then, 'keep' now)" in err
    assert len(await prompts_on_topic(settings)) == 4


async def test_a_folder_is_read_whole_or_refused_before_anything_is_published(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    # The held-back case of issue 25: 10 prompts in each of three kinds of file, and a note.
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat_rows(10, "a")))
    (folder / "b.json").write_text(json.dumps(chat_rows(10, "b")))
    write_parquet(folder / "c.parquet", chat_rows(10, "c"))
    (folder / "notes.txt").write_text("where these prompts came from\n")

    rc, err = run_cli(settings, "mixed", cwd=tmp_path)
    assert rc == 2, err
    assert "mixed: is a folder holding 1 file(s) that are not prompt files (notes.txt)" in err
    assert "--skip-unreadable" in err
    assert not await topic_partitions(settings.kafka, settings.topics.prompts, timeout_s=30), (
        "refused before anything is published: not even the prompts topic was created"
    )

    rc, err = run_cli(settings, "mixed", "--skip-unreadable", cwd=tmp_path)
    assert rc == 0, err
    assert "producer: published 30, skipped 0 (already published by an earlier run), bad 0" in err
    got = sorted(r.id for r in await prompts_on_topic(settings))
    assert got == sorted(f"{p}-{i:05d}" for p in "abc" for i in range(10))


async def test_sigkill_mid_json_array_then_rerun_publishes_each_id_exactly_once(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    n = 4000
    path = tmp_path / "big.json"
    path.write_text(json.dumps(chat_rows(n, "a"), indent=1))
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    slow = ["--producer.checkpoint-every", "200", "--producer.max-records-per-s", "500"]
    committed = await sigkill_mid_file(settings, str(path), *slow, n=n, cwd=tmp_path)

    visible = [r.key for r in await read_all(settings, settings.topics.prompts, visible_now=True)]
    assert sorted(visible) == [f"a-{i:05d}".encode() for i in range(committed)], "exactly the committed rows"

    rc, err = run_cli(settings, str(path), cwd=tmp_path)
    assert rc == 0, err
    assert f"published records 1-{committed} " in err and f"continuing after record {committed}" in err
    assert f"producer: published {n - committed}, skipped {committed} " in err
    counts = Counter(r.key for r in await read_all(settings, settings.topics.prompts))
    assert set(counts) == {f"a-{i:05d}".encode() for i in range(n)}
    assert set(counts.values()) == {1}, "each id exactly once for read_committed readers"
    assert len(await read_all(settings, settings.topics.prompts, isolation="read_uncommitted")) > n


async def test_sigkill_mid_parquet_then_rerun_publishes_each_id_exactly_once(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    n = 4000
    path = tmp_path / "big.parquet"
    rows = chat_rows(n, "p")
    write_parquet(path, rows, row_group_size=500)
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    slow = ["--producer.checkpoint-every", "200", "--producer.max-records-per-s", "500"]
    committed = await sigkill_mid_file(settings, str(path), *slow, n=n, cwd=tmp_path)

    # Rewritten with other row groups and compression: the same rows, so the resume point holds.
    write_parquet(path, rows, row_group_size=333)
    rc, err = run_cli(settings, str(path), cwd=tmp_path)
    assert rc == 0, err
    assert f"continuing after record {committed}" in err
    assert f"producer: published {n - committed}, skipped {committed} " in err
    counts = Counter(r.key for r in await read_all(settings, settings.topics.prompts))
    assert set(counts) == {f"p-{i:05d}".encode() for i in range(n)}
    assert set(counts.values()) == {1}, "each id exactly once for read_committed readers"

    # A published row changed: refused, nothing published.
    changed = [*rows[:10], {**rows[10], "messages": [{"role": "user", "content": "Changed"}]}, *rows[11:]]
    write_parquet(path, changed)
    rc, err = run_cli(settings, str(path), cwd=tmp_path)
    assert rc == 2, err
    assert f"its first {n} records differ from the ones published" in err
    assert len(await read_all(settings, settings.topics.prompts)) == n
