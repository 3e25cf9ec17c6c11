"""The chaos audit's checks: pure functions over what was read back (:class:`AuditData`).

Each check returns a :class:`Check`: its name, whether it passed, one line of detail and the
first violations (at most :data:`SHOWN`). The checks, and the guarantee each one tests
(README, *Guarantees*):

``producer_bad_lines``
    every poison line of the input is in the producer's bad-lines report with its file and line
    number, and no other line is;
``prompts_exactly_once``
    the prompts topic holds every valid input id exactly once (the producer was SIGKILLed and
    resumed) and nothing else;
``dataset_exactly_once``
    the export succeeded and its dataset holds every valid id exactly once, as a completion or an
    error with a reason; over-context prompts are errors; nothing is missing, duplicated or extra;
``generate_commits_durable``
    at every sampled moment (and at the end), every prompt below the generation group's committed
    offset had a completion or error record in Kafka already (record timestamp at or before the
    sample);
``sink_commits_durable``
    at every sampled moment (and at the end), every completions/errors record below the sink
    group's committed offset was inside an S3 object already (``LastModified`` at or before the
    sample);
``s3_contiguous``
    per partition the objects are well formed, do not overlap, and cover every record of the topic
    (no record before the first object, between two objects or after the last);
``duplicates_within_bound``
    per prompts partition, the extra generations (result records beyond the first for one prompt)
    are at most ``max_uncommitted`` per handover of that partition: a SIGKILL of its owner, or an
    owner that lost it (a graceful stop, a rebalance, a server that went down);
``pipeline_recovered``
    every fault was undone, every process ran at the end, none exited on its own, and the
    pipeline drained (every prompt generated, every result in S3) within the time limit.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

SHOWN: Final = 10
"""Violations kept per check."""


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    name: str
    ok: bool
    detail: str
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    """One completion or error record of the run, as Kafka holds it.

    Attributes:
        kind: ``completion`` or ``error``.
        partition, offset: its place in the completions or errors topic.
        source: (partition, offset) of the prompt it answers (None if the record has none).
        id: the record id.
        timestamp_ms: the record's Kafka timestamp (its producer's send time), ms since the epoch.
    """

    kind: Literal["completion", "error"]
    partition: int
    offset: int
    source: tuple[int, int] | None
    id: str
    timestamp_ms: int


@dataclass(frozen=True)
class Sample:
    """A group's committed offsets, read at ``at_s`` (seconds since the epoch, taken after the
    answer came)."""

    at_s: float
    offsets: dict[tuple[str, int], int]


@dataclass(frozen=True)
class ObjectSpan:
    """One S3 object: its key's start offset, its metadata's end offset, its lines' offsets."""

    key: str
    topic: str
    partition: int
    start: int
    end: int | None
    offsets: tuple[int, ...]
    last_modified_s: float
    problem: str | None = None


@dataclass
class AuditData:
    """Everything the checks look at.

    Attributes:
        input_name: the input as given to the producer (the report's ``file``).
        valid_ids: ids of the input that must reach the dataset.
        over_context_ids: valid ids whose prompt is over the context length (must be errors).
        bad_lines: 1-based line -> poison kind.
        bad_report: the producer's bad-lines report rows (``file``, ``line``, ``reason``, ``id``?).
        prompts: (partition, offset, id) of every prompt record on the prompts topic.
        results: every completion and error record.
        topic_offsets: (topic, partition) -> offsets holding a record, completions and errors.
        objects: the sink's objects.
        generate_samples / sink_samples: committed offsets sampled during the run, the final
            reading last.
        dataset_completions / dataset_errors: id -> count in the export's shards; errors: id -> reasons.
        export_status: the export's exit status.
        handovers: prompts partition -> handovers (see ``duplicates_within_bound``).
        max_uncommitted: ``consumer.max_uncommitted``.
        prompts_topic: its name.
        run_problems: what went wrong running the faults or draining (empty: nothing).
    """

    input_name: str
    valid_ids: set[str]
    over_context_ids: set[str]
    bad_lines: dict[int, str]
    bad_report: list[dict[str, object]]
    prompts: list[tuple[int, int, str]]
    results: list[Result]
    topic_offsets: dict[tuple[str, int], list[int]]
    objects: list[ObjectSpan]
    generate_samples: list[Sample]
    sink_samples: list[Sample]
    dataset_completions: Counter[str]
    dataset_errors: dict[str, list[str]]
    export_status: int
    handovers: dict[int, int]
    max_uncommitted: int
    prompts_topic: str
    run_problems: list[str] = field(default_factory=list)


def _check(name: str, violations: list[str], ok_detail: str, bad_detail: str) -> Check:
    return Check(name, not violations, bad_detail if violations else ok_detail, violations[:SHOWN])


def check_bad_lines(d: AuditData) -> Check:
    """``producer_bad_lines``: the report names every poison line, and only those."""
    reported: dict[int, list[dict[str, object]]] = defaultdict(list)
    violations = []
    for row in d.bad_report:
        line = row.get("line")
        if row.get("file") != d.input_name or not isinstance(line, int):
            violations.append(f"report row for another file or without a line: {row}")
            continue
        reported[line].append(row)
    for line, kind in sorted(d.bad_lines.items()):
        if line not in reported:
            violations.append(f"line {line} ({kind}) is not in the bad-lines report")
        elif len(reported[line]) > 1:
            violations.append(f"line {line} is reported {len(reported[line])} times")
    for line in sorted(set(reported) - set(d.bad_lines)):
        violations.append(f"line {line} reported bad but is valid: {reported[line][0].get('reason')}")
    return _check(
        "producer_bad_lines",
        violations,
        f"{len(d.bad_lines)} poison lines reported with file and line, no valid line reported",
        f"{len(violations)} problems in the bad-lines report",
    )


def check_prompts_exactly_once(d: AuditData) -> Check:
    """``prompts_exactly_once``: every valid id once on the prompts topic, nothing else."""
    counts = Counter(record_id for _, _, record_id in d.prompts)
    violations = [f"id {i} published {n} times" for i, n in sorted(counts.items()) if n > 1]
    violations += [f"id {i} never published" for i in sorted(d.valid_ids - set(counts))]
    violations += [f"id {i} published but not a valid input line" for i in sorted(set(counts) - d.valid_ids)]
    return _check(
        "prompts_exactly_once",
        violations,
        f"{len(counts)} ids on the prompts topic, each once",
        f"{len(violations)} ids not published exactly once",
    )


def check_dataset(d: AuditData) -> Check:
    """``dataset_exactly_once``: export ok, every valid id once (completion or error with a
    reason), over-context ids as errors, nothing missing, duplicated or extra."""
    violations = [] if d.export_status == 0 else [f"the export exited with status {d.export_status}"]
    both = Counter(d.dataset_completions)
    for record_id, reasons in d.dataset_errors.items():
        both[record_id] += len(reasons)
        violations += [f"error of {record_id} has no reason" for r in reasons if not r.strip()]
    violations += [f"id {i} is {n} times in the dataset" for i, n in sorted(both.items()) if n > 1]
    violations += [f"id {i} is missing from the dataset" for i in sorted(d.valid_ids - set(both))]
    violations += [f"id {i} is in the dataset but not a valid input" for i in sorted(set(both) - d.valid_ids)]
    violations += [
        f"over-context id {i} is a completion, not an error"
        for i in sorted(d.over_context_ids)
        if d.dataset_completions.get(i)
    ]
    errors = sum(len(r) for r in d.dataset_errors.values())
    return _check(
        "dataset_exactly_once",
        violations,
        f"{len(both)} ids, each once: {sum(d.dataset_completions.values())} completions, {errors} errors "
        "with a reason",
        f"{len(violations)} problems in the dataset",
    )


def _first_result_ms(results: list[Result]) -> dict[tuple[int, int], int]:
    first: dict[tuple[int, int], int] = {}
    for r in results:
        if r.source is not None:
            first[r.source] = min(first.get(r.source, r.timestamp_ms), r.timestamp_ms)
    return first


def check_generate_commits(d: AuditData) -> Check:
    """``generate_commits_durable``: no sampled commit of the generation group passed a prompt
    whose result was not in Kafka yet."""
    first = _first_result_ms(d.results)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _ in d.prompts:
        by_partition[partition].append(offset)
    violations: list[str] = []
    bad = 0
    for sample in d.generate_samples:
        for (topic, partition), committed in sorted(sample.offsets.items()):
            if topic != d.prompts_topic:
                continue
            for offset in by_partition.get(partition, []):
                if offset >= committed:
                    break
                done_ms = first.get((partition, offset))
                if done_ms is None or done_ms > sample.at_s * 1000:
                    bad += 1
                    when = "never" if done_ms is None else f"{done_ms / 1000 - sample.at_s:+.3f} s after"
                    violations.append(
                        f"committed {committed} on partition {partition} at {sample.at_s:.3f}, but the "
                        f"result of offset {offset} came {when}"
                    )
    return _check(
        "generate_commits_durable",
        violations,
        f"{len(d.generate_samples)} samples of the generation group's commits, none past a missing result",
        f"{bad} committed prompts without a durable result",
    )


def check_sink_commits(d: AuditData) -> Check:
    """``sink_commits_durable``: no sampled commit of the sink group passed a record that was not
    in an S3 object yet."""
    stored: dict[tuple[str, int, int], float] = {}
    for obj in d.objects:
        for offset in obj.offsets:
            key = (obj.topic, obj.partition, offset)
            stored[key] = min(stored.get(key, obj.last_modified_s), obj.last_modified_s)
    violations: list[str] = []
    bad = 0
    for sample in d.sink_samples:
        for (topic, partition), committed in sorted(sample.offsets.items()):
            for offset in d.topic_offsets.get((topic, partition), []):
                if offset >= committed:
                    break
                at = stored.get((topic, partition, offset))
                if at is None or at > sample.at_s:
                    bad += 1
                    when = "in no object" if at is None else f"stored {at - sample.at_s:+.0f} s after"
                    violations.append(
                        f"committed {committed} on {topic}-{partition} at {sample.at_s:.3f}, but offset "
                        f"{offset} was {when}"
                    )
    return _check(
        "sink_commits_durable",
        violations,
        f"{len(d.sink_samples)} samples of the sink group's commits, none past a record missing from S3",
        f"{bad} committed records not durable in S3",
    )


def check_s3_contiguous(d: AuditData) -> Check:
    """``s3_contiguous``: objects well formed, no overlap, every record covered."""
    violations: list[str] = []
    spans: dict[tuple[str, int], list[ObjectSpan]] = defaultdict(list)
    for obj in d.objects:
        if obj.problem is not None:
            violations.append(f"{obj.key}: {obj.problem}")
            continue
        spans[(obj.topic, obj.partition)].append(obj)
        offsets = list(obj.offsets)
        if not offsets or offsets[0] != obj.start or offsets[-1] != obj.end:
            first, last = (offsets[0], offsets[-1]) if offsets else (None, None)
            violations.append(
                f"{obj.key}: lines {first}..{last}, but the key starts at {obj.start} and the metadata "
                f"ends at {obj.end}"
            )
        if any(b <= a for a, b in itertools.pairwise(offsets)):
            violations.append(f"{obj.key}: line offsets not strictly increasing")
    for where in sorted(set(spans) | set(d.topic_offsets)):
        topic, partition = where
        records = d.topic_offsets.get(where, [])
        objs = sorted(spans.get(where, []), key=lambda o: o.start)
        covered_to = -1  # the last offset covered so far
        for obj in objs:
            end = obj.end if obj.end is not None else obj.start
            if obj.start <= covered_to:
                violations.append(
                    f"{topic}-{partition}: {obj.key} starts at {obj.start}, overlapping {covered_to}"
                )
            holes = [o for o in records if covered_to < o < obj.start]
            if holes:
                violations.append(
                    f"{topic}-{partition}: records {holes[0]}..{holes[-1]} ({len(holes)}) are in no object "
                    f"(before {obj.start})"
                )
            covered_to = max(covered_to, end)
        tail = [o for o in records if o > covered_to]
        if tail:
            violations.append(
                f"{topic}-{partition}: records {tail[0]}..{tail[-1]} ({len(tail)}) after the last object"
            )
    return _check(
        "s3_contiguous",
        violations,
        f"{len(d.objects)} objects over {len(spans)} partitions: contiguous, no overlap, every record stored",
        f"{len(violations)} layout problems",
    )


def duplicates_per_partition(results: list[Result]) -> dict[int, int]:
    """Prompts partition -> result records beyond the first per prompt."""
    per_source = Counter(r.source for r in results if r.source is not None)
    dups: dict[int, int] = defaultdict(int)
    for (partition, _), n in per_source.items():
        dups[partition] += n - 1
    return dict(dups)


def duplicate_bounds(handovers: Mapping[int, int], max_uncommitted: int) -> dict[int, int]:
    """Prompts partition -> the README's bound on its duplicates: ``max_uncommitted`` per handover."""
    return {p: max_uncommitted * n for p, n in handovers.items()}


def check_duplicates(d: AuditData) -> Check:
    """``duplicates_within_bound``: per partition, duplicates <= max_uncommitted x handovers."""
    dups = duplicates_per_partition(d.results)
    bounds = duplicate_bounds(d.handovers, d.max_uncommitted)
    violations = [
        f"partition {p}: {n} duplicate generations, bound {bounds.get(p, 0)} "
        f"({d.handovers.get(p, 0)} handovers x max_uncommitted {d.max_uncommitted})"
        for p, n in sorted(dups.items())
        if n > bounds.get(p, 0)
    ]
    total, bound = sum(dups.values()), sum(bounds.values())
    per = ", ".join(f"p{p} {dups.get(p, 0)}/{bounds.get(p, 0)}" for p in sorted(set(dups) | set(bounds)))
    return _check(
        "duplicates_within_bound",
        violations,
        f"{total} duplicate generations, bound {bound} (per partition {per})",
        f"{len(violations)} partitions over the bound (per partition {per})",
    )


def check_recovered(d: AuditData) -> Check:
    """``pipeline_recovered``: faults undone, processes up, no exit on its own, drained in time."""
    return _check(
        "pipeline_recovered",
        list(d.run_problems),
        "every fault undone, every process up, drained in time",
        f"{len(d.run_problems)} problems running the pipeline",
    )


CHECKS: Final = (
    check_bad_lines,
    check_prompts_exactly_once,
    check_dataset,
    check_generate_commits,
    check_sink_commits,
    check_s3_contiguous,
    check_duplicates,
    check_recovered,
)


def audit(d: AuditData) -> list[Check]:
    """Run every check on ``d``."""
    return [check(d) for check in CHECKS]
