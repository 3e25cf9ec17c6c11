"""Reading a finished audit run back into :class:`bench.chaos.audit.AuditData`: the topics and
S3 objects (:mod:`bench.chaos.readback`), the export's shards, the producer's bad-lines report,
the consumers' and the sink's traces (:mod:`bench.chaos.trace`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Literal

import zstandard

from bench.chaos.audit import AuditData, ObjectSpan, Result
from bench.chaos.inputs import InputPlan
from bench.chaos.monitor import Monitor
from bench.chaos.readback import TopicRecord, read_objects, read_records
from bench.chaos.trace import read_traces
from streams.config import Settings
from streams.records import CompletionRecord, ErrorRecord, PromptRecord, RecordDecodeError, decode
from streams.storage import s3_client


def _prompt_id(record: TopicRecord) -> str:
    try:
        return decode(record.value or b"", PromptRecord).id
    except RecordDecodeError:
        return (record.key or b"").decode("utf-8", "replace")


def _results(records: list[TopicRecord], completions: bool) -> list[Result]:
    out = []
    for r in records:
        rec: CompletionRecord | ErrorRecord = (
            decode(r.value or b"", CompletionRecord) if completions else decode(r.value or b"", ErrorRecord)
        )
        source = (rec.source.partition, rec.source.offset) if rec.source is not None else None
        kind: Literal["completion", "error"] = "completion" if completions else "error"
        out.append(Result(kind, r.partition, r.offset, source, rec.id, r.timestamp_ms, r.topic))
    return out


def read_shards(dataset: Path) -> tuple[Counter[str], dict[str, list[str]]]:
    """Ids of the export's completion shards (with counts) and, per id of its error shards, the
    error messages (``error_type: message``)."""
    completions: Counter[str] = Counter()
    errors: dict[str, list[str]] = {}
    for shard in sorted(dataset.glob("completions-*.jsonl.zst")):
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            completions.update(decode(line, CompletionRecord).id for line in f if line.strip())
    for shard in sorted(dataset.glob("errors-*.jsonl.zst")):
        with zstandard.open(shard, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    e = decode(line, ErrorRecord)
                    errors.setdefault(e.id, []).append(f"{e.error_type}: {e.message}" if e.message else "")
    return completions, errors


def read_bad_lines(path: Path) -> list[dict[str, object]]:
    """The producer's bad-lines report rows (empty when it wrote none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def collect(
    settings: Settings,
    plan: InputPlan,
    monitor: Monitor,
    *,
    dataset: Path,
    bad_lines: Path,
    traces: Path,
    export_status: int,
    run_problems: list[str],
    harness_problems: list[str],
) -> AuditData:
    """Everything the audit checks, read back after the run (``traces``: the trace folder).

    Raises:
        ValueError: a trace file is torn before its last line.
        KafkaError, TimeoutError: Kafka could not be read.
        botocore.exceptions.ClientError, BotoCoreError: S3 could not be read.
    """
    t = settings.topics
    prompts = await read_records(settings, t.prompts)
    completions = await read_records(settings, t.completions)
    errors = await read_records(settings, t.errors)
    topic_offsets: dict[tuple[str, int], list[int]] = {}
    for r in completions + errors:
        topic_offsets.setdefault((r.topic, r.partition), []).append(r.offset)
    for offsets in topic_offsets.values():
        offsets.sort()
    client = s3_client(settings.s3)
    stored = await asyncio.to_thread(
        read_objects, client, settings.s3.bucket, settings.s3.prefix, settings.run_id
    )
    objects = [
        ObjectSpan(
            o.key,
            o.topic,
            o.partition,
            o.start_offset,
            o.end_offset,
            tuple(o.offsets),
            o.last_modified,
            o.problem,
        )
        for o in stored
    ]
    done, failed = read_shards(dataset)
    return AuditData(
        input_name=str(plan.path),
        valid_ids=plan.valid,
        over_context_ids=plan.over_context,
        bad_lines=dict(plan.bad),
        bad_report=read_bad_lines(bad_lines),
        prompts=[(r.partition, r.offset, _prompt_id(r)) for r in prompts],
        results=_results(completions, True) + _results(errors, False),
        topic_offsets=topic_offsets,
        objects=objects,
        generate_samples=monitor.generate,
        sink_samples=monitor.sink,
        dataset_completions=done,
        dataset_errors=failed,
        export_status=export_status,
        max_uncommitted=settings.consumer.max_uncommitted,
        prompts_topic=t.prompts,
        traces=read_traces(traces),
        wall_minus_mono_s=time.time() - time.monotonic(),
        sample_failures=monitor.failures,
        run_problems=run_problems,
        harness_problems=harness_problems,
    )
