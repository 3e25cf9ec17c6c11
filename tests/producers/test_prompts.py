"""The prompt producer against the real broker: bundled formats, exactly once across a SIGKILL,
bad lines, compressed files, stdin and S3 inputs."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import zstandard
from aiokafka import AIOKafkaConsumer, TopicPartition

from launch.stack import LocalStack
from producers.cli import main
from producers.partitioning import input_salt, partition_for
from streams.config import Settings
from streams.inputs import MappingOptions, parse_line
from streams.kafka import consumer_kwargs
from streams.records import ProgressRecord, PromptRecord, decode, key_of
from streams.storage import s3_client
from streams.topics import ensure_topics, topic_specs
from tests.helpers import broker_shapes, partition_leader
from tests.producers.support import flags, read_all, run_cli, sigkill_mid_file, spawn

pytestmark = pytest.mark.kafka


# --- helpers -----------------------------------------------------------------------------------


async def run_main(settings: Settings, *args: str) -> int:
    """``main()`` in a worker thread (it runs its own event loop), as the command line would."""
    return await asyncio.to_thread(main, [*args, *flags(settings)])


async def prompts_on_topic(settings: Settings) -> list[PromptRecord]:
    records = await read_all(settings, settings.topics.prompts)
    for r in records:
        assert r.value is not None
        assert r.key == key_of(decode(r.value, PromptRecord).id), "the Kafka key is the record id"
    return [decode(r.value or b"", PromptRecord) for r in records]


def expected_records(path: Path, source: str, options: MappingOptions) -> list[PromptRecord]:
    """What the producer must publish for ``path``: every non-blank line through parse_line."""
    lines = path.read_bytes().splitlines()
    return [
        parse_line(raw, source=source, line=n, options=options)
        for n, raw in enumerate(lines, 1)
        if raw.strip()
    ]


def write_chat_rows(path: Path, n: int, *, prefix: str | None = "k", pad: int = 200) -> list[bytes]:
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"messages": [{"role": "user", "content": f"Question {i}: {'x' * pad}?"}]}
        if prefix is not None:
            row["id"] = f"{prefix}-{i:05d}"
        rows.append(json.dumps(row).encode())
    path.write_bytes(b"\n".join(rows) + b"\n")
    return rows


# --- bundled formats ---------------------------------------------------------------------------


async def test_gsm8k_with_prompt_field_becomes_one_record_per_question(
    kafka: str, settings: Settings, sample_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sample_data / "gsm8k" / "test.jsonl"
    rc = await run_main(settings, str(path), "--prompt-field", "question", "--keep-field", "answer")
    assert rc == 0
    assert "producer: published 1319, skipped 0" in capsys.readouterr().err
    got = await prompts_on_topic(settings)
    options = MappingOptions(prompt_field="question", keep_fields=("answer",), run_id=settings.run_id)
    expected = expected_records(path, str(path), options)
    assert sorted(got, key=lambda r: r.metadata.line) == expected
    first = next(r for r in got if r.id == "test.jsonl:1")
    assert first.messages[0]["content"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.metadata.extra["answer"].endswith("#### 18")
    assert first.run_id == settings.run_id


async def test_mt_bench_and_bfcl_files_in_one_run(
    kafka: str, settings: Settings, sample_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [
        sample_data / "mt_bench" / "question.jsonl",
        sample_data / "bfcl" / "BFCL_v4_simple_python.json",
        sample_data / "bfcl" / "BFCL_v4_multiple.json",
    ]
    assert await run_main(settings, *map(str, files)) == 0
    assert "producer: published 680, skipped 0 (already published by an earlier run), bad 0" in (
        capsys.readouterr().err
    )
    records = await read_all(settings, settings.topics.prompts)
    got = {
        decode(r.value or b"", PromptRecord).id: (r.partition, decode(r.value or b"", PromptRecord))
        for r in records
    }
    options = MappingOptions(run_id=settings.run_id)
    expected = [rec for f in files for rec in expected_records(f, str(f), options)]
    assert len(records) == len(got) == len(expected) == 680
    # the round-robin starts from a hash of each input's identity, its resolved path
    identities = await asyncio.to_thread(lambda: {str(f): str(f.resolve()) for f in files})
    for rec in expected:
        partition, record = got[rec.id]
        assert record == rec
        salt = input_salt(identities[rec.metadata.source])
        line = rec.metadata.line
        assert partition == partition_for(
            rec, b"", settings.topics.partitions, "balanced", line=line, salt=salt
        )
    for f in files:  # the default deals each file's lines evenly over the partitions
        per_partition = Counter(p for p, r in got.values() if r.metadata.source == str(f))
        assert len(per_partition) == settings.topics.partitions
        assert max(per_partition.values()) - min(per_partition.values()) <= 1

    mt = got["81"][1]
    assert mt.messages == [{"role": "user", "content": mt.metadata.extra["turns"][0]}]
    assert len(mt.metadata.extra["turns"]) == 2 and mt.metadata.extra["category"] == "writing"
    bfcl = got["multiple_0"][1]
    assert bfcl.tools is not None and len(bfcl.tools) > 1
    dumped = json.dumps([r.tools for _, r in got.values() if r.tools])
    assert '"type": "dict"' not in dumped and '"type": "object"' in dumped
    assert bfcl.tools[0]["function"]["parameters"]["type"] == "object"


async def test_key_by_prefix_puts_a_shared_system_prompt_on_one_partition(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "prefixed.jsonl"
    rows = []
    for i in range(90):
        messages = [{"role": "user", "content": f"question {i}"}]
        if i % 3:
            messages.insert(0, {"role": "system", "content": f"You are assistant {i % 3}."})
        rows.append(json.dumps({"id": f"q{i}", "messages": messages}))
    path.write_text("\n".join(rows) + "\n")
    assert await run_main(settings, str(path), "--key-by", "prefix") == 0
    by_system: dict[str | None, set[int]] = {}
    for r in await read_all(settings, settings.topics.prompts):
        record = decode(r.value or b"", PromptRecord)
        system = record.messages[0]["content"] if record.messages[0]["role"] == "system" else None
        by_system.setdefault(system, set()).add(r.partition)
    assert len(by_system["You are assistant 1."]) == 1
    assert len(by_system["You are assistant 2."]) == 1
    assert len(by_system[None]) > 1, "records without a shared prefix are spread by id"


# --- exactly once across a SIGKILL ------------------------------------------------------------


@broker_shapes()
async def test_sigkill_mid_file_then_rerun_publishes_each_id_exactly_once(
    settings: Settings, tmp_path: Path
) -> None:
    n = 4000
    path = tmp_path / "big.jsonl"
    write_chat_rows(path, n)
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    # 250 records/s: the file takes 16 s, so even a starved test loop (4 workers beside it on 2
    # cores) has seconds to catch the middle.
    slow = ["--producer.checkpoint-every", "200", "--producer.max-records-per-s", "250"]

    # Kill the producer mid-file while records of its open transaction are already in the log
    # (the watchers are ready before the producer starts: tests/producers/support.py).
    committed = await sigkill_mid_file(settings, str(path), *slow, n=n, cwd=tmp_path)

    # The killed transaction stays open (until the broker's timeout or a new producer of the same
    # transactional id): read_committed readers see exactly the committed lines meanwhile.
    visible = [r.key for r in await read_all(settings, settings.topics.prompts, visible_now=True)]
    assert sorted(visible) == [f"k-{i:05d}".encode() for i in range(committed)], "exactly the committed lines"
    in_log = await read_all(settings, settings.topics.prompts, isolation="read_uncommitted")
    assert len(in_log) > committed, "records of the killed transaction are in the log, uncommitted"

    rc, err = run_cli(settings, str(path), cwd=tmp_path)
    assert rc == 0, err
    assert f"continuing after line {committed}" in err
    assert f"producer: published {n - committed}, skipped {committed} " in err
    counts = Counter(r.key for r in await read_all(settings, settings.topics.prompts))
    assert set(counts) == {f"k-{i:05d}".encode() for i in range(n)}
    assert set(counts.values()) == {1}, "each id exactly once for read_committed readers"
    assert len(await read_all(settings, settings.topics.prompts, isolation="read_uncommitted")) > n


@pytest.mark.parametrize("brokers", [pytest.param(3, id="3brokers")])
async def test_a_broker_killed_mid_file_loses_and_repeats_nothing(
    kafka_cluster_stack: LocalStack, settings: Settings, tmp_path: Path
) -> None:
    """On 3 brokers (3 replicas, min ISR 2), SIGKILL the leader of a prompts partition while the
    producer is mid-file, inside a transaction, and start it again later: the producer finishes
    on the brokers left and exits 0, and read_committed readers see every id exactly once."""
    n = 3000
    path = tmp_path / "big.jsonl"
    write_chat_rows(path, n)
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    leader = await partition_leader(settings, settings.topics.prompts, 0)
    victim = f"kafka-{leader}"
    progress = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await progress.start()
    proc: subprocess.Popen[bytes] | None = None
    try:
        tp = TopicPartition(settings.topics.producer_progress, 0)
        progress.assign([tp])
        await progress.seek_to_beginning(tp)
        # 500 records/s: 6 s of publishing, so the kill lands mid-file on a busy machine too.
        proc = spawn(settings, str(path), "--producer.max-records-per-s", "500", cwd=tmp_path)
        committed = 0
        deadline = time.monotonic() + 60
        while committed < n * 0.2:
            assert time.monotonic() < deadline, "the producer never committed a fifth of the file"
            assert proc.poll() is None, "the producer ended before the broker was killed"
            for messages in (await progress.getmany(timeout_ms=100)).values():
                committed = max(
                    [committed, *(decode(m.value or b"", ProgressRecord).published for m in messages)]
                )
        assert kafka_cluster_stack.kill(victim)
        try:
            _, err = await asyncio.to_thread(proc.communicate, None, 120)
        finally:
            await asyncio.to_thread(kafka_cluster_stack.up, [victim])
    finally:
        await progress.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert f"producer: published {n}," in err.decode()
    counts = Counter(r.key for r in await read_all(settings, settings.topics.prompts))
    assert set(counts) == {f"k-{i:05d}".encode() for i in range(n)}
    assert set(counts.values()) == {1}, "each id exactly once for read_committed readers"


async def test_a_second_producer_of_the_same_input_takes_over_and_each_id_lands_once(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    n = 12000
    path = tmp_path / "big.jsonl"
    write_chat_rows(path, n, pad=20)
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    first = spawn(
        settings,
        str(path),
        "--producer.checkpoint-every",
        "500",
        "--producer.max-records-per-s",
        "500",  # 24 s for the file: the newcomer starts long before the first producer could finish
        cwd=tmp_path,
    )
    progress = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=None))
    await progress.start()
    try:
        tp = TopicPartition(settings.topics.producer_progress, 0)
        progress.assign([tp])
        await progress.seek_to_beginning(tp)
        committed = 0
        deadline = time.monotonic() + 60
        while committed < n // 4:
            assert time.monotonic() < deadline and first.poll() is None, "the first producer never got going"
            for messages in (await progress.getmany(timeout_ms=100)).values():
                committed = max(
                    committed, *(decode(m.value or b"", ProgressRecord).published for m in messages)
                )
    finally:
        await progress.stop()

    # Same input, same run id: same transactional id. The newcomer fences the first producer,
    # whose open transaction is aborted, and continues from the last committed resume point.
    rc, err = await asyncio.to_thread(run_cli, settings, str(path), cwd=tmp_path)
    assert rc == 0, err
    _, first_err = await asyncio.to_thread(first.communicate, None, 60)
    first_err_text = first_err.decode()
    assert first.returncode == 3, first_err_text
    assert "another producer started publishing the same input" in first_err_text
    assert "Traceback" not in first_err_text and "never retrieved" not in first_err_text
    counts = Counter(r.key for r in await read_all(settings, settings.topics.prompts))
    assert set(counts) == {f"k-{i:05d}".encode() for i in range(n)}
    assert set(counts.values()) == {1}, "each id exactly once for read_committed readers"


# --- bad input ---------------------------------------------------------------------------------


def bad_fixture(path: Path) -> dict[int, tuple[str | None, str]]:
    """A file with every kind of bad line; returns {line: (id or None, reason fragment)}."""
    lines: list[bytes] = [
        json.dumps({"id": "good-1", "prompt": "What is 2 + 2?"}).encode(),  # 1
        b"",  # 2: blank, skipped
        b'{"id": "broken", "prompt": ',  # 3
        b'{"id": "latin1", "prompt": "caf\xe9"}',  # 4
        json.dumps({"id": "no-fields"}).encode(),  # 5
        json.dumps({"id": "typed", "messages": "hello"}).encode(),  # 6
        json.dumps({"id": "empty", "messages": []}).encode(),  # 7
        json.dumps({"id": "good-1", "prompt": "again"}).encode(),  # 8
        json.dumps({"id": "huge", "prompt": "x" * 80_000}).encode(),  # 9: record over 64 KiB
        json.dumps({"id": "endless", "prompt": "y" * 300_000}).encode(),  # 10: line over 256 KiB
        b"   \t",  # 11: blank
        json.dumps({"id": "empty-text", "prompt": "  "}).encode(),  # 12
        json.dumps([1, 2]).encode(),  # 13
        json.dumps({"id": "good-2", "messages": [{"role": "user", "content": "Hi"}]}).encode(),  # 14
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return {
        3: (None, "invalid JSON"),
        4: (None, "not valid UTF-8: byte 0xe9"),
        5: ("no-fields", "cannot tell this row's format"),
        6: ("typed", "messages is a string"),
        7: ("empty", "messages is empty"),
        8: ("good-1", "duplicate id, first seen at line 1"),
        9: ("huge", "over the prompts topic's limit of 65536 bytes"),
        10: (None, "over the 262144-byte limit"),
        12: ("empty-text", "prompt is an empty string"),
        13: (None, "row is an array"),
    }


async def test_every_kind_of_bad_line_is_reported_and_good_lines_arrive(
    kafka: str, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "mixed.jsonl"
    bad = bad_fixture(path)
    small = ["--kafka.max-message-bytes", "65536"]
    rc, err = run_cli(settings, "mixed.jsonl", *small, cwd=tmp_path)
    assert rc == 1, err
    assert "Traceback" not in err
    report = tmp_path / "bad-lines.jsonl"
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["line"] for r in rows] == sorted(bad)
    for row in rows:
        record_id, reason = bad[row["line"]]
        assert row["file"] == "mixed.jsonl"
        assert reason in row["reason"], row
        assert row.get("id") == record_id, row
        assert f"bad line mixed.jsonl:{row['line']}: " in err
    assert "producer: published 2, skipped 0 (already published by an earlier run), bad 10" in err
    assert sorted(r.id for r in await prompts_on_topic(settings)) == ["good-1", "good-2"]

    # Re-run with --allow-bad: nothing new to publish, the same report, exit 0.
    report.unlink()
    rc, err = run_cli(settings, "mixed.jsonl", *small, "--allow-bad", cwd=tmp_path)
    assert rc == 0, err
    assert "producer: published 0, skipped 2 (already published by an earlier run), bad 10" in err
    assert [json.loads(line) for line in report.read_text().splitlines()] == rows
    assert len(await prompts_on_topic(settings)) == 2


async def test_missing_inputs_and_broken_json_arrays_exit_2_without_traceback(
    kafka: str, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, err = run_cli(settings, "nope.jsonl", cwd=tmp_path)
    assert (rc, err.strip()) == (2, "error: nope.jsonl: no such file")
    assert await run_main(settings, str(tmp_path / "*.none")) == 2
    assert "no file matches this pattern" in capsys.readouterr().err
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"prompt": "a"}, {"prompt": "b"}], indent=1)[:-2])  # truncated
    assert await run_main(settings, str(array)) == 2
    err = capsys.readouterr().err
    assert "array.json: not a valid JSON array: it ends without its closing ']' (after record 2" in err
    assert "Traceback" not in err
    assert not (tmp_path / "bad-lines.jsonl").exists()


async def test_grown_file_resumes_changed_file_is_refused(
    kafka: str, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "grow.jsonl"
    rows = write_chat_rows(path, 40)
    path.write_bytes(b"\n".join(rows[:30]) + b"\n")
    assert await run_main(settings, str(path)) == 0
    path.write_bytes(b"\n".join(rows) + b"\n")  # 10 lines appended
    assert await run_main(settings, str(path)) == 0
    assert "producer: published 10, skipped 30" in capsys.readouterr().err
    assert sorted(r.id for r in await prompts_on_topic(settings)) == [f"k-{i:05d}" for i in range(40)]

    edited = [*rows[:4], rows[4].replace(b"Question", b"Query"), *rows[5:]]
    path.write_bytes(b"\n".join(edited) + b"\n")
    assert await run_main(settings, str(path)) == 2
    assert "its first 40 lines differ from the ones published" in capsys.readouterr().err
    assert await run_main(settings, str(path), "--tag", "new") == 2
    assert "with other mapping options (tags: [] then, ['new'] now)" in capsys.readouterr().err
    assert await run_main(settings, str(path), "--from-scratch") == 0
    assert len(await prompts_on_topic(settings)) == 80, "--from-scratch publishes everything again"


# --- compressed files, stdin, S3 ---------------------------------------------------------------


async def test_gzip_zstd_and_stdin_inputs(kafka: str, settings: Settings, tmp_path: Path) -> None:
    plain = tmp_path / "rows.jsonl"
    rows = write_chat_rows(plain, 50, prefix=None)
    data = plain.read_bytes()
    (tmp_path / "rows.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "rows.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    assert await run_main(settings, str(tmp_path / "rows.jsonl.*"), "--tag", "t1") == 0

    stdin_data = zstandard.ZstdCompressor().compress(data)  # compression is detected on stdin too
    rc, err = run_cli(settings, "-", "--tag", "t1", cwd=tmp_path, input=stdin_data)
    assert rc == 0, err
    assert "producer: published 50," in err
    rc, err = run_cli(settings, "-", "--tag", "t1", cwd=tmp_path, input=stdin_data)
    assert "producer: published 0, skipped 50 " in err, "the same stdin stream is recognised"

    got = {r.id: r for r in await prompts_on_topic(settings)}
    assert len(got) == 150
    contents = [json.loads(row)["messages"] for row in rows]
    for name, source in (("rows.jsonl.gz", str(tmp_path / "rows.jsonl.gz")), ("stdin", "-")):
        for i, messages in enumerate(contents, 1):
            record = got[f"{name}:{i}"]
            assert record.messages == messages
            assert (record.metadata.source, record.metadata.line, record.metadata.tags) == (source, i, ["t1"])
    assert got["rows.jsonl.zst:50"].messages == contents[49]


async def test_s3_objects_by_uri_and_glob(
    kafka: str, s3: str, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, prefix = settings.s3.bucket, settings.s3.prefix
    client = s3_client(settings.s3)
    rows = write_chat_rows(tmp_path / "a.jsonl", 30, prefix="s3a")
    client.put_object(Bucket=bucket, Key=f"{prefix}/in/a.jsonl", Body=b"\n".join(rows) + b"\n")
    more = write_chat_rows(tmp_path / "b.jsonl", 20, prefix="s3b")
    body = zstandard.ZstdCompressor().compress(b"\n".join(more) + b"\n")
    client.put_object(Bucket=bucket, Key=f"{prefix}/in/b.jsonl.zst", Body=body)
    s3_flags = ["--s3.endpoint-url", s3, "--s3.bucket", bucket]

    assert await run_main(settings, f"s3://{bucket}/{prefix}/in/*.jsonl*", *s3_flags) == 0
    got = {r.id: r for r in await prompts_on_topic(settings)}
    assert sorted(got) == [f"s3a-{i:05d}" for i in range(30)] + [f"s3b-{i:05d}" for i in range(20)]
    assert got["s3b-00019"].metadata.source == f"s3://{bucket}/{prefix}/in/b.jsonl.zst"
    assert got["s3a-00000"].messages == json.loads(rows[0])["messages"]

    capsys.readouterr()
    assert await run_main(settings, f"s3://{bucket}/{prefix}/in/missing.jsonl", *s3_flags) == 2
    assert "missing.jsonl: no such S3 object" in capsys.readouterr().err


async def test_a_template_renders_nested_fields_and_a_row_missing_one_is_a_bad_line(
    kafka: str, settings: Settings, sample_data: Path, tmp_path: Path
) -> None:
    tasks = sample_data / "instructions" / "tasks.jsonl"
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    broken = {"id": "no-input", "name": "t", "instruction": "Translate it.", "instances": [{"output": "x"}]}
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows[:5], broken, *rows[5:]]))
    template = str(sample_data / "instructions" / "template.j2")
    rc, err = run_cli(
        settings,
        "tasks.jsonl",
        "--template",
        template,
        "--system-template",
        "Task: {{ name }}.",
        cwd=tmp_path,
    )
    assert rc == 1, err
    [bad] = [json.loads(line) for line in (tmp_path / "bad-lines.jsonl").read_text().splitlines()]
    assert (bad["line"], bad["id"]) == (6, "no-input")
    assert "template field instances[0].input is missing" in bad["reason"], bad
    got = {r.id: r.messages for r in await prompts_on_topic(settings)}
    assert set(got) == {r["id"] for r in rows}
    for row in rows:
        system, user = got[row["id"]]
        assert system == {"role": "system", "content": f"Task: {row['name']}."}
        assert (
            user["content"].startswith(row["instruction"]) and row["instances"][0]["input"] in user["content"]
        )

    # The same run id with another template: refused, the earlier records are not re-published.
    rc, err = run_cli(settings, "tasks.jsonl", "--template", "{{ instruction }}", cwd=tmp_path)
    assert rc == 2 and "other mapping options (template:" in err, err


async def test_samples_survive_a_sigkill_mid_file_each_exactly_once_with_its_own_seed(
    settings: Settings, tmp_path: Path
) -> None:
    """``--samples 3`` publishes a line as 3 records; a checkpoint (every 200 records, not a
    multiple of 3) never splits a line's samples, so a SIGKILL and a re-run publish each sample
    exactly once."""
    lines, samples = 1200, 3
    path = tmp_path / "big.jsonl"
    write_chat_rows(path, lines, pad=50)
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    slow = ["--samples", "3", "--producer.checkpoint-every", "200", "--producer.max-records-per-s", "250"]
    committed = await sigkill_mid_file(settings, str(path), *slow, n=lines * samples, cwd=tmp_path)
    assert committed % samples == 0, f"a checkpoint split a line's samples: {committed} records"

    rc, err = run_cli(settings, str(path), "--samples", "3", cwd=tmp_path)
    assert rc == 0, err
    assert f"continuing after line {committed // samples}" in err
    got = await prompts_on_topic(settings)
    assert Counter(r.id for r in got) == Counter(
        f"k-{i:05d}#{k}" for i in range(lines) for k in range(samples)
    )
    for record in got:
        assert record.sample is not None and record.prompt_id == record.id.removesuffix(f"#{record.sample}")
    seeds: dict[str, set[int | None]] = {r.prompt_id: set() for r in got}
    for record in got:
        seeds[record.prompt_id].add(record.params.seed)
    assert {len(s) for s in seeds.values()} == {samples}, "each sample of a prompt has its own seed"

    # Another --samples for the same run id: refused, not mixed.
    rc, err = run_cli(settings, str(path), "--samples", "2", cwd=tmp_path)
    assert rc == 2 and "samples: 3 then, 2 now" in err, err


async def test_limit_reads_the_first_rows_across_a_folder_and_resumes_exactly(
    settings: Settings, tmp_path: Path
) -> None:
    """``--limit 250`` over a folder of three 100-row files (a blank line and a bad row among
    them): the first 250 rows in order, bad rows counted, the third file read only in part. A
    SIGKILL mid-way and a re-run publish each of them exactly once; another limit is refused."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a", "b", "c"):
        rows = write_chat_rows(folder / f"{name}.jsonl", 100, prefix=name, pad=60)
        if name == "b":  # a blank line (not a row) and a bad row (a row)
            rows = [*rows[:10], b"", b'{"messages": "nope"}', *rows[10:]]
            (folder / "b.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    specs = topic_specs(settings)
    await ensure_topics(settings, [specs["prompts"], specs["producer_progress"]])
    slow = ["--limit", "250", "--producer.checkpoint-every", "20", "--producer.max-records-per-s", "120"]
    committed = await sigkill_mid_file(settings, str(folder), *slow, n=249, cwd=tmp_path)
    assert 0 < committed < 249
    rc, err = run_cli(settings, str(folder), "--limit", "250", "--allow-bad", cwd=tmp_path)
    assert rc == 0, err
    assert "c.jsonl: --limit 250 reached at line 49" in err, err  # 100 + 101 rows before it
    expected = [f"a-{i:05d}" for i in range(100)] + [f"b-{i:05d}" for i in range(100)]
    expected += [f"c-{i:05d}" for i in range(49)]  # 250 rows = 249 good + 1 bad
    assert Counter(r.id for r in await prompts_on_topic(settings)) == Counter(expected)

    rc, err = run_cli(settings, str(folder), "--limit", "250", "--allow-bad", cwd=tmp_path)
    assert rc == 0 and "published 0" in err, err
    rc, err = run_cli(settings, str(folder), "--allow-bad", cwd=tmp_path)
    assert rc == 2 and "limit: 250 then" in err, err
