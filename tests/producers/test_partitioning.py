"""Which partition a record goes to: balanced (dealt by line), by id (Kafka's default
partitioner), by shared prefix."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiokafka.partitioner import murmur2

from producers.partitioning import input_salt, partition_for, stable_hash
from streams.records import PromptMetadata, PromptRecord, key_of


def test_prefix_partitioning_groups_records_by_system_prompt_and_tools() -> None:
    def rec(i: int, system: str | None, tools: list[dict[str, Any]] | None = None) -> PromptRecord:
        messages = [{"role": "user", "content": f"q{i}"}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        return PromptRecord(
            id=f"r{i}", messages=messages, tools=tools, metadata=PromptMetadata(source="t", line=i)
        )

    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for system, tools in (("You are A.", None), ("You are B.", None), (None, tool), ("You are A.", tool)):
        parts = {
            partition_for(rec(i, system, tools), key_of(f"r{i}"), 7, "prefix", line=i + 1, salt=0)
            for i in range(50)
        }
        assert len(parts) == 1, (system, tools)
    # Without a shared prefix the record is dealt by line, as in the default: spread.
    no_prefix = [
        partition_for(rec(i, None), key_of(f"r{i}"), 7, "prefix", line=i + 1, salt=0) for i in range(50)
    ]
    assert no_prefix == [i % 7 for i in range(50)]
    # By id: Kafka's default partitioner, whatever the line.
    by_id = {partition_for(rec(i, "S"), key_of(f"r{i}"), 7, "id", line=1, salt=0) for i in range(50)}
    assert by_id == set(range(7))


def test_balanced_partitioning_deals_each_input_evenly_and_deterministically() -> None:
    record = PromptRecord(
        id="x", messages=[{"role": "user", "content": "q"}], metadata=PromptMetadata(source="t", line=1)
    )
    for source in ("a.jsonl", "b.jsonl", "/data/prompts.jsonl.zst"):
        salt = input_salt(source)
        parts = [partition_for(record, b"x", 7, "balanced", line=n, salt=salt) for n in range(1, 1001)]
        counts = Counter(parts)
        assert set(counts) == set(range(7)) and max(counts.values()) - min(counts.values()) <= 1
        assert parts == [
            partition_for(record, b"x", 7, "balanced", line=n, salt=salt) for n in range(1, 1001)
        ]
    # Inputs start at different partitions, so many one-line inputs still spread.
    firsts = {
        partition_for(record, b"x", 7, "balanced", line=1, salt=input_salt(f"f{i}.jsonl")) for i in range(40)
    }
    assert len(firsts) == 7


def test_by_id_is_kafkas_default_partitioner() -> None:
    record = PromptRecord(
        id="x", messages=[{"role": "user", "content": "q"}], metadata=PromptMetadata(source="t", line=1)
    )
    for record_id in ("a", "prompt-00042", "日本語"):
        key = key_of(record_id)
        expected = (murmur2(key) & 0x7FFFFFFF) % 12
        assert partition_for(record, key, 12, "id", line=5, salt=3) == expected


def test_hashes_are_stable_across_processes() -> None:
    # BLAKE2b, not hash(): these exact values keep a re-run's lines on the first run's partitions.
    assert stable_hash(b"") == int.from_bytes(bytes.fromhex("e4a6a0577479b2b4"), "big")
    assert input_salt("/data/prompts.jsonl") == stable_hash(b"/data/prompts.jsonl")
