"""Fixtures of the export's tests on the real Kafka and S3: a run as the sink writes it."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from streams.config import Settings
from streams.records import ErrorRecord, encode
from tests.sinks.export.support import input_rows, produce_values
from tests.sinks.support import completion, create_topics, sink_settings, write_objects


@pytest.fixture
async def cfg(kafka: str, s3: str, settings: Settings) -> Settings:
    """The test's settings with 3 partitions per topic, the topics created."""
    cfg = sink_settings(settings)
    await create_topics(cfg)
    return cfg


@pytest.fixture
async def run(cfg: Settings, tmp_path: Path) -> Path:
    """A run: completions 0, 1, 2, 3 and a later duplicate of 1 (finish_reason length); dead letters
    for 2 (which also has a completion) and 5, in Kafka and in S3 as the sink writes them. The input
    file lists ids 0..6, so 4 and 6 are missing."""
    later_dup = msgspec.structs.replace(completion(1, cfg.run_id), finish_reason="length")
    await produce_values(
        cfg,
        cfg.topics.completions,
        [encode(completion(i, cfg.run_id)) for i in range(4)] + [encode(later_dup)],
    )
    dead = [
        ErrorRecord(id=f"id-00000{i}", stage="generate", error_type="FatalRequestError", message="400")
        for i in (2, 5)
    ]
    await produce_values(cfg, cfg.topics.errors, [encode(e) for e in dead])
    await write_objects(cfg, cfg.topics.completions, 0)
    await write_objects(cfg, cfg.topics.errors, 0, record_type=ErrorRecord)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(input_rows(range(7)))
    return inputs
