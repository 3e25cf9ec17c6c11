"""Helpers of the export's tests: records produced by id, input rows, the export's command line."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from streams.config import Settings
from streams.records import key_of
from tests.sinks.support import produce

__all__ = ["export_argv", "input_rows", "produce_values"]


async def produce_values(cfg: Settings, topic: str, values: list[bytes], partition: int = 0) -> None:
    """Produce record JSON ``values`` to ``topic``, keyed by their ids."""
    await produce(
        cfg, topic, [(key_of(msgspec.json.decode(v)["id"]), v) for v in values], partition=partition
    )


def input_rows(ids: range) -> str:
    """JSON Lines of prompts ``id-000000`` .. for ``ids``, and a blank line."""
    return "".join(json.dumps({"id": f"id-{i:06d}", "prompt": f"q{i}"}) + "\n" for i in ids) + "\n"


def export_argv(settings: Settings, to: str, inputs: Path | str | None, *extra: str) -> list[str]:
    """``python -m sinks.export`` arguments for the run of ``settings`` into ``to``."""
    t = settings.topics
    return [
        "--run-id",
        settings.run_id,
        "--to",
        to,
        *(["--input", str(inputs)] if inputs is not None else []),
        "--s3.prefix",
        settings.s3.prefix,
        "--topics.prompts",
        t.prompts,
        "--topics.completions",
        t.completions,
        "--topics.errors",
        t.errors,
        *extra,
    ]
