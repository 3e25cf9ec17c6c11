"""``kafkagen export --output-format`` on a run staged in the real Kafka and S3 as the sink writes it:
completions with reasoning, with tool calls and with quality flags, dead letters (one without its
prompt) and a regenerated attempt, exported as JSON Lines, Parquet (read with pyarrow and with
Hugging Face ``datasets``, offline), OpenAI Batch output and error files (validated with the
``openai`` package's types) and chat rows (each reasoning mode); shards listed in the manifest with
their SHA-256; stale shards and the card of an earlier export removed, to a folder and to S3."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import openai.types.chat
import pyarrow.parquet as pq
import pytest
import zstandard

from sinks.export.cli import main
from sinks.export.formats.card import MARKER
from sinks.export.formats.parquet import COMPLETION_SCHEMA, ERROR_SCHEMA
from streams.config import Settings
from streams.records import CompletionRecord, ErrorRecord, encode, key_of
from tests.sinks.export.format_records import TOOL_CALLS, TOOLS, completion, dead_letter, regenerated
from tests.sinks.export.support import export_argv
from tests.sinks.support import client, produce, write_objects

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


@pytest.fixture
async def run(cfg: Settings, tmp_path: Path) -> Path:
    """Ids 0..5 of run ``cfg.run_id`` in Kafka and in S3: 0 flagged ``repetition_loop`` then regenerated
    (attempt 1 wins), 1 tool calls without reasoning, 2 neither reasoning nor tools, 3 truncated
    (``length``, flagged); dead letters 4 (with its prompt) and 5 (without). Returns the input file."""
    r = cfg.run_id
    first = completion(0, r, quality=["repetition_loop"])
    completions = [
        first,
        completion(1, r, tools=True, reasoning=None, cached_tokens=16),
        completion(2, r, reasoning=None),
        completion(3, r, quality=["truncated"], finish_reason="length"),
        regenerated(first),
    ]
    errors = [dead_letter(4, r), dead_letter(5, r, with_prompt=False)]
    await produce(cfg, cfg.topics.completions, [(key_of(c.id), encode(c)) for c in completions], partition=0)
    await produce(cfg, cfg.topics.errors, [(key_of(e.id), encode(e)) for e in errors], partition=0)
    await write_objects(cfg, cfg.topics.completions, 0)
    await write_objects(cfg, cfg.topics.errors, 0, record_type=ErrorRecord)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps({"id": f"id-{i:06d}", "prompt": "q"}) + "\n" for i in range(6)))
    return inputs


def _jsonl(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    if path.suffix == ".zst":
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    return [json.loads(line) for line in data.splitlines()]


def _paths(manifest: dict[str, Any], fmt: str, kind: str) -> list[str]:
    return [s["path"] for s in manifest["shards"] if s["format"] == fmt and s["kind"] == kind]


def test_every_format_from_one_export(
    cfg: Settings, run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "dataset"
    argv = export_argv(  # openai-batch: the spelling of earlier versions, taken as openai_batch
        cfg,
        str(out),
        run,
        "--output-format",
        "jsonl,parquet",
        "--output-format",
        "openai-batch",
        "--output-format",
        "chat",
    )
    assert main([*argv, "--reasoning", "inline", "--shard-records", "2"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == {"ids": 6, "completions": 4, "reused": 0, "errors": 2}
    assert manifest["formats"] == {
        "formats": ["jsonl", "parquet", "openai_batch", "chat"],
        "reasoning": "inline",
    }
    assert manifest["by_attempt"] == {"0": 5, "1": 1} and manifest["card"] == "README.md"
    assert [(s["path"], s["format"], s["kind"], s["records"]) for s in manifest["shards"]] == [
        ("completions-00000.jsonl.zst", "jsonl", "completions", 2),
        ("completions-00001.jsonl.zst", "jsonl", "completions", 2),
        ("errors-00000.jsonl.zst", "jsonl", "errors", 2),
        ("completions-00000.parquet", "parquet", "completions", 2),
        ("completions-00001.parquet", "parquet", "completions", 2),
        ("errors-00000.parquet", "parquet", "errors", 2),
        ("batch-output-00000.jsonl", "openai_batch", "completions", 2),
        ("batch-output-00001.jsonl", "openai_batch", "completions", 2),
        ("batch-errors-00000.jsonl", "openai_batch", "errors", 2),
        ("chat-00000.jsonl.zst", "chat", "completions", 2),
        ("chat-00001.jsonl.zst", "chat", "completions", 2),
    ]
    for shard in manifest["shards"]:
        data = (out / shard["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"] and len(data) == shard["bytes"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [s["path"] for s in manifest["shards"]] + ["manifest.json", "README.md"]
    ), "no staging folder left behind"

    # jsonl: the records as produced, as before
    records = [
        msgspec.json.decode(json.dumps(row), type=CompletionRecord)
        for p in _paths(manifest, "jsonl", "completions")
        for row in _jsonl(out / p)
    ]
    assert [(c.id, c.attempt) for c in records] == [
        ("id-000001", 0),
        ("id-000002", 0),
        ("id-000003", 0),
        ("id-000000", 1),
    ]

    # parquet, with pyarrow: one typed schema for every shard, nulls where a record has no value
    files = [out / p for p in _paths(manifest, "parquet", "completions")]
    for f in files:
        schema = pq.read_schema(f)
        assert schema.remove_metadata().equals(COMPLETION_SCHEMA.remove_metadata())
        assert json.loads(schema.metadata[b"kafkagen"]) == {
            "run_id": cfg.run_id,
            "kind": "completions",
            "schema_version": 1,
        }
    assert pq.ParquetFile(files[0]).metadata.num_row_groups == 1
    rows = {r["id"]: r for f in files for r in pq.read_table(f).to_pylist()}
    assert set(rows) == {"id-000000", "id-000001", "id-000002", "id-000003"}
    zero, tools, plain, cut = (rows[f"id-00000{i}"] for i in range(4))
    assert zero["attempt"] == 1 and zero["quality"] == [] and zero["content"].endswith("(regenerated)")
    assert zero["reasoning_content"] == "Add them.\n" and zero["tools"] is None and zero["tool_calls"] is None
    assert tools["reasoning_content"] is None and json.loads(tools["tool_calls"]) == TOOL_CALLS
    assert (
        json.loads(tools["tools"]) == TOOLS
        and tools["cached_tokens"] == 16
        and tools["finish_reason"] == "tool_calls"
    )
    assert plain["reasoning_content"] is None and plain["tools"] is None and plain["cached_tokens"] is None
    assert cut["quality"] == ["truncated"] and cut["finish_reason"] == "length"
    assert (cut["prompt_tokens"], cut["completion_tokens"], cut["reasoning_tokens"]) == (30, 15, 5)
    assert (cut["latency_s"], cut["source_topic"], cut["source_offset"]) == (1.5, "r.prompts", 3)
    errors = pq.read_table(out / "errors-00000.parquet")
    assert errors.schema.remove_metadata().equals(ERROR_SCHEMA.remove_metadata())
    by_id = {r["id"]: r for r in errors.to_pylist()}
    assert by_id["id-000004"]["error_type"] == "FatalRequestError" and by_id["id-000004"]["status"] == 400
    assert json.loads(by_id["id-000004"]["messages"])[0]["role"] == "system"
    assert by_id["id-000005"]["messages"] is None and by_id["id-000005"]["metadata_source"] is None

    # parquet, with Hugging Face datasets, offline (nothing leaves the machine)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    assert datasets.config.HF_HUB_OFFLINE
    loaded = datasets.load_dataset(
        "parquet",
        data_files=[str(f) for f in files],
        split="train",
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert loaded.num_rows == 4
    assert loaded.features["prompt_tokens"].dtype == "int64" and loaded.features["content"].dtype == "string"
    ds_rows = {r["id"]: r for r in loaded}
    assert ds_rows["id-000002"]["reasoning_content"] is None and ds_rows["id-000002"]["tool_calls"] is None
    assert ds_rows["id-000003"]["quality"] == ["truncated"]
    loaded_errors = datasets.load_dataset(
        "parquet",
        data_files=str(out / "errors-*.parquet"),
        split="train",
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert sorted(loaded_errors["id"]) == ["id-000004", "id-000005"]
    by_card = datasets.load_dataset(str(out), "errors", split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert by_card.num_rows == 2, "the card's configs name the shards"

    # the dataset card
    text = (out / "README.md").read_text()
    assert MARKER in text and f"# kafkagen run `{cfg.run_id}`" in text
    assert "- ids: 6; completions: 4; errors: 2" in text
    assert "- by finish_reason: `length` 1, `stop` 2, `tool_calls` 1" in text
    assert "- by quality class (of 6 records): `error` 2, `truncated` 1" in text
    assert "- by attempt: `0` 5, `1` 1" in text

    # openai_batch: every body is a ChatCompletion; custom_id is the record id
    lines = [row for p in _paths(manifest, "openai_batch", "completions") for row in _jsonl(out / p)]
    assert [line["custom_id"] for line in lines] == ["id-000001", "id-000002", "id-000003", "id-000000"]
    for line in lines:
        assert line["error"] is None and line["response"]["status_code"] == 200
        body = openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
        assert body.model == "test-model" and body.usage is not None
    tool_line = openai.types.chat.ChatCompletion.model_validate(lines[0]["response"]["body"])
    assert (
        tool_line.choices[0].message.tool_calls is not None and tool_line.choices[0].message.content is None
    )
    assert lines[3]["response"]["body"]["choices"][0]["message"]["reasoning_content"] == "Add them.\n"
    dead = _jsonl(out / "batch-errors-00000.jsonl")
    assert [(d["custom_id"], d["response"], d["error"]["code"]) for d in dead] == [
        ("id-000004", None, "FatalRequestError"),
        ("id-000005", None, "FatalRequestError"),
    ]

    # chat, reasoning inline
    chat = {row["id"]: row for p in _paths(manifest, "chat", "completions") for row in _jsonl(out / p)}
    assert set(chat) == {"id-000000", "id-000001", "id-000002", "id-000003"}, "dead letters have no row"
    assert chat["id-000000"]["messages"][-1] == {
        "role": "assistant",
        "content": "<think>\nAdd them.\n</think>\n\n0 (regenerated)",
    }
    assert (
        chat["id-000001"]["tools"] == TOOLS and chat["id-000001"]["messages"][-1]["tool_calls"] == TOOL_CALLS
    )
    assert "tools" not in chat["id-000002"] and chat["id-000002"]["messages"][-1] == {
        "role": "assistant",
        "content": "\n4",
    }


@pytest.mark.parametrize("where", ["local", "s3"])
def test_chat_reasoning_field_and_an_earlier_export_s_files_are_removed(
    cfg: Settings, run: Path, tmp_path: Path, where: str
) -> None:
    prefix = f"{cfg.s3.prefix}-export"
    to = str(tmp_path / "dataset") if where == "local" else f"s3://{cfg.s3.bucket}/{prefix}"
    s3 = client(cfg)

    def names() -> list[str]:
        if where == "local":
            return sorted(p.name for p in (tmp_path / "dataset").iterdir())
        resp = s3.list_objects_v2(Bucket=cfg.s3.bucket, Prefix=f"{prefix}/")
        return sorted(o["Key"].rsplit("/", 1)[1] for o in resp.get("Contents", []))

    def read(name: str) -> bytes:
        if where == "local":
            return (tmp_path / "dataset" / name).read_bytes()
        resp = s3.list_objects_v2(Bucket=cfg.s3.bucket, Prefix=f"{prefix}/")
        (key,) = [o["Key"] for o in resp.get("Contents", []) if o["Key"].rsplit("/", 1)[1] == name]
        body: bytes = s3.get_object(Bucket=cfg.s3.bucket, Key=key)["Body"].read()
        return body

    assert (
        main(
            export_argv(cfg, to, run, "--output-format", "parquet,openai_batch,chat", "--reasoning", "field")
        )
        == 0
    )
    assert names() == [
        "README.md",
        "batch-errors-00000.jsonl",
        "batch-output-00000.jsonl",
        "chat-00000.jsonl.zst",
        "completions-00000.parquet",
        "errors-00000.parquet",
        "manifest.json",
    ]
    chat = {
        json.loads(line)["id"]: json.loads(line)
        for line in zstandard.ZstdDecompressor()
        .stream_reader(read("chat-00000.jsonl.zst"))
        .read()
        .splitlines()
    }
    assert chat["id-000000"]["messages"][-1] == {
        "role": "assistant",
        "content": "\n0 (regenerated)",
        "reasoning_content": "Add them.\n",
    }
    assert "reasoning_content" not in chat["id-000002"]["messages"][-1]
    assert json.loads(read("manifest.json"))["formats"] == {
        "formats": ["parquet", "openai_batch", "chat"],
        "reasoning": "field",
    }

    assert main(export_argv(cfg, to, run)) == 0  # the default, jsonl: every other file is stale
    assert names() == ["completions-00000.jsonl.zst", "errors-00000.jsonl.zst", "manifest.json"]
    manifest = json.loads(read("manifest.json"))
    assert manifest["card"] is None and manifest["formats"] == {"formats": ["jsonl"], "reasoning": None}
    if where == "local":  # a README.md of the user's is never removed
        (tmp_path / "dataset" / "README.md").write_text("# my notes\n")
        assert main(export_argv(cfg, to, run)) == 0
        assert read("README.md") == b"# my notes\n"


def test_an_input_format_given_as_format_says_where_it_goes(
    cfg: Settings, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(export_argv(cfg, str(tmp_path / "d"), run, "--output-format", "mt_bench")) == 2
    err = capsys.readouterr().err
    assert "unknown format 'mt_bench'" in err and "the format of --input files is --input-format" in err
    assert (
        main(
            export_argv(cfg, str(tmp_path / "d"), run, "--input-format", "prompt", "--output-format", "chat")
        )
        == 0
    )


@pytest.mark.parametrize("body", [b"", b"# notes\n"], ids=["empty", "notes"])
def test_a_readme_of_the_user_s_on_s3_is_kept(cfg: Settings, run: Path, body: bytes) -> None:
    """How the export tells its own card from a user's README.md (an empty object has no first
    byte to read): the user's is neither replaced nor removed as an earlier export's card."""
    s3 = client(cfg)
    prefix = f"{cfg.s3.prefix}-head"
    s3.put_object(Bucket=cfg.s3.bucket, Key=f"{prefix}/README.md", Body=body)
    assert main(export_argv(cfg, f"s3://{cfg.s3.bucket}/{prefix}", run)) == 0
    assert s3.get_object(Bucket=cfg.s3.bucket, Key=f"{prefix}/README.md")["Body"].read() == body
