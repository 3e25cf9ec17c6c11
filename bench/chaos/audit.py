"""The chaos audit's checks: pure functions over what was read back (:class:`AuditData`).

Each check returns a :class:`Check`: its name, whether it passed, one line of detail and the
first violations (at most :data:`SHOWN`). The product's checks, and the guarantee each one tests
(README, *Guarantees*; docs/chaos.md says how each was seen to fail on a planted violation):

``producer_bad_lines``
    every poison line of the input is in the producer's bad-lines report with its file and line
    number, and no other line is;
``prompts_exactly_once``
    the prompts topic holds every valid input id exactly once (the producer was SIGKILLed and
    resumed) and nothing else;
``topics_cover_every_prompt``
    the raw completions and dead-letter topics (before any de-duplication) hold a result of
    every valid id, an error of every over-context id, and nothing else;
``dataset_exactly_once``
    the export succeeded and its dataset holds every valid id exactly once, as a completion or an
    error with a reason; over-context prompts are errors; nothing is missing, duplicated or extra;
``generate_commits_durable``
    every commit a consumer sent passed only prompts whose result Kafka had acknowledged before
    (the consumers' traces, :mod:`bench.chaos.trace`), and every committed offset sampled from
    Kafka is one of those commits;
``sink_commits_durable``
    every commit the sink sent passed only records already in an S3 object, and every sampled
    committed offset is one of those commits;
``s3_contiguous``
    per partition the objects are well formed, do not overlap, and cover every record of the topic
    (no record before the first object, between two objects or after the last);
``duplicates_within_bound``
    every result beyond a prompt's first has its own cause in the traces (a handover with the
    prompt written but uncommitted, or a retried write), and no handover caused more than
    ``max_uncommitted``;
``pipeline_recovered``
    no process exited on its own, each stopped cleanly on SIGTERM, and the pipeline drained.

The harness's check, ``harness_on_time``: every fault was injected on time and undone as
planned. It is a separate verdict: an overloaded machine can fail it without the product failing.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Final, Literal

from bench.chaos.trace import (
    Ack,
    Cause,
    Commit,
    ProcessTrace,
    acks_by_record,
    duplicate_causes,
    first_acks,
    generate_commits,
    sink_commits,
    stored_spans,
)

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
        topic: the completions or dead-letter topic's name.
    """

    kind: Literal["completion", "error"]
    partition: int
    offset: int
    source: tuple[int, int] | None
    id: str
    timestamp_ms: int
    topic: str = ""


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
        max_uncommitted: ``consumer.max_uncommitted``.
        prompts_topic: its name.
        traces: the consumers' and the sink's traces (:mod:`bench.chaos.trace`).
        wall_minus_mono_s: ``time.time() - time.monotonic()`` on this host (dates S3's
            ``LastModified`` on the traces' clock).
        sample_failures: commit samples that could not be taken (Kafka unreachable).
        run_problems: what the product did wrong running and draining (empty: nothing).
        harness_problems: what the harness did not do as planned (empty: nothing).
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
    max_uncommitted: int
    prompts_topic: str
    traces: list[ProcessTrace] = field(default_factory=list)
    wall_minus_mono_s: float = 0.0
    sample_failures: int = 0
    run_problems: list[str] = field(default_factory=list)
    harness_problems: list[str] = field(default_factory=list)


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


def _prefix_latest(offsets: list[int], at: dict[int, float]) -> list[float]:
    """``out[i]``: the latest of ``at[o]`` over the first ``i`` of ``offsets`` (inf when one has none)."""
    out = [float("-inf")]
    for o in offsets:
        out.append(max(out[-1], at.get(o, float("inf"))))
    return out


def _first_late(offsets: list[int], at: dict[int, float], below: int, t: float) -> tuple[int, float | None]:
    """The first of ``offsets`` under ``below`` whose moment in ``at`` is after ``t`` (None: never)."""
    for o in offsets:
        if o >= below:
            break
        if at.get(o, float("inf")) > t:
            return o, at.get(o)
    raise AssertionError("no late offset")  # called only when the prefix says there is one


def _untraced(
    samples: list[Sample], commits: list[Commit], topics: set[str], prompts_topic: str
) -> list[str]:
    """Sampled committed offsets that no traced commit sent: the trace is incomplete there."""
    traced = {(c.topic or prompts_topic, c.partition, c.offset) for c in commits}
    return sorted(
        {
            f"{topic}-{partition} was committed at {offset} (sampled at {s.at_s:.3f}) by no traced commit"
            for s in samples
            for (topic, partition), offset in s.offsets.items()
            if topic in topics and (topic, partition, offset) not in traced
        }
    )


def check_generate_commits(d: AuditData) -> Check:
    """``generate_commits_durable``: every commit a consumer sent (its own trace) passed only
    prompts whose result Kafka had acknowledged before it was sent; every committed offset the
    monitor sampled is one of those commits."""
    acked = first_acks(d.traces)
    offsets: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _ in d.prompts:
        offsets[partition].append(offset)
    for offs in offsets.values():
        offs.sort()
    at = {p: {o: acked[(p, o)] for o in offs if (p, o) in acked} for p, offs in offsets.items()}
    latest = {p: _prefix_latest(offs, at[p]) for p, offs in offsets.items()}
    commits = generate_commits(d.traces)
    violations = [] if commits else ["no consumer traced a commit: the audit has nothing to judge"]
    bad = 0
    for c in commits:
        offs = offsets.get(c.partition, [])
        if latest.get(c.partition, [float("-inf")])[bisect.bisect_left(offs, c.offset)] > c.t:
            bad += 1
            offset, when = _first_late(offs, at[c.partition], c.offset, c.t)
            later = "never acknowledged" if when is None else f"acknowledged {when - c.t:+.3f} s later"
            violations.append(
                f"pid {c.pid} committed {c.offset} on partition {c.partition}, but the result of offset "
                f"{offset} was {later}"
            )
    violations += _untraced(d.generate_samples, commits, {d.prompts_topic}, d.prompts_topic)
    return _check(
        "generate_commits_durable",
        violations,
        f"{len(commits)} commits sent by the consumers, each after the results it passed were acknowledged; "
        f"{len(d.generate_samples)} samples of the group's offsets all among them "
        f"({d.sample_failures} samples skipped: Kafka unreachable)",
        f"{bad} commits ahead of an acknowledgement, {len(violations) - bad} other problems",
    )


def check_sink_commits(d: AuditData) -> Check:
    """``sink_commits_durable``: every commit the sink sent passed only records that were in an
    S3 object before it was sent (the sink's own trace: the upload returned, or a recovery listed
    the object; an object neither traced is dated by ``LastModified`` + 1 s, S3 keeping whole
    seconds); every committed offset the monitor sampled is one of those commits."""
    at: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    records = d.topic_offsets

    def stored(topic: str, partition: int, first: int, last: int, t: float) -> None:
        offs = records.get((topic, partition), [])
        seen = at[(topic, partition)]
        for o in offs[bisect.bisect_left(offs, first) : bisect.bisect_right(offs, last)]:
            seen[o] = min(seen.get(o, t), t)

    for topic, partition, first, last, t in stored_spans(d.traces):
        stored(topic, partition, first, last, t)
    traced = {k: dict(v) for k, v in at.items()}
    for obj in d.objects:
        if obj.end is not None:
            dated_at = obj.last_modified_s + 1.0 - d.wall_minus_mono_s
            stored(obj.topic, obj.partition, obj.start, obj.end, dated_at)
    dated = sum(len(set(v) - set(traced.get(k, {}))) for k, v in at.items())
    latest = {k: _prefix_latest(offs, at[k]) for k, offs in records.items()}
    commits = sink_commits(d.traces)
    violations = [] if commits else ["the sink traced no commit: the audit has nothing to judge"]
    bad = 0
    for c in commits:
        key = (c.topic or "", c.partition)
        offs = records.get(key, [])
        if latest.get(key, [float("-inf")])[bisect.bisect_left(offs, c.offset)] > c.t:
            bad += 1
            offset, when = _first_late(offs, at[key], c.offset, c.t)
            later = "in no object" if when is None else f"stored {when - c.t:+.3f} s later"
            violations.append(
                f"pid {c.pid} committed {c.offset} on {c.topic}-{c.partition}, but offset {offset} was "
                f"{later}"
            )
    topics = {t for t, _ in records} | {c.topic for c in commits if c.topic}
    violations += _untraced(d.sink_samples, commits, topics, d.prompts_topic)
    return _check(
        "sink_commits_durable",
        violations,
        f"{len(commits)} commits sent by the sink, each after its records were in S3 ({dated} records "
        f"dated by LastModified); {len(d.sink_samples)} samples of the group's offsets all among them",
        f"{bad} commits ahead of an upload, {len(violations) - bad} other problems",
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


def _explain(
    results: list[Result], acks: dict[tuple[str, int, int], Ack], known: list[Cause]
) -> tuple[list[Cause], list[str]]:
    """The causes that explain one prompt's ``results`` beyond its first, and what nothing explains.

    The first acknowledged result needs no cause. Each later acknowledged one needs a handover
    before its acknowledgement: by another consumer, or by its own writer after that writer's
    previous result of the prompt (a consumer that wrote it twice without losing the partition
    in between is no handover). A result no trace acknowledged needs any cause: its writer was
    killed before the trace line, a send that failed had landed (a retry), or a write cancelled
    when its consumer gave the partition up had landed all the same (a handover)."""
    known = sorted(known, key=lambda c: c.at)
    used: list[Cause] = []
    unexplained: list[str] = []
    traced = sorted(
        (
            (acks[(r.topic, r.partition, r.offset)], r)
            for r in results
            if (r.topic, r.partition, r.offset) in acks
        ),
        key=lambda ar: ar[0].t,
    )
    untraced = [r for r in results if (r.topic, r.partition, r.offset) not in acks]
    if traced:
        last_ack = {traced[0][0].proc: traced[0][0].t}
        for ack, r in traced[1:]:
            since = last_ack.get(ack.proc, float("-inf"))
            cause = next(
                (
                    c
                    for c in known
                    if all(c is not u for u in used)
                    and c.kind == "handover"
                    and c.at < ack.t
                    and (c.proc != ack.proc or c.at > since)
                ),
                None,
            )
            last_ack[ack.proc] = ack.t
            if cause is None:
                unexplained.append(
                    f"{r.topic}-{r.partition}@{r.offset} (pid {ack.pid}, acknowledged at {ack.t:.3f})"
                )
            else:
                used.append(cause)
    else:
        untraced = untraced[1:]
    for r in untraced:
        cause = next((c for c in known if all(c is not u for u in used)), None)
        if cause is None:
            unexplained.append(f"{r.topic}-{r.partition}@{r.offset} (acknowledged in no trace)")
        else:
            used.append(cause)
    return used, unexplained


def check_duplicates(d: AuditData) -> Check:
    """``duplicates_within_bound``: every result beyond a prompt's first has a cause of its own
    in the consumers' traces (:func:`bench.chaos.trace.duplicate_causes`, :func:`_explain`: a
    handover with the prompt written but uncommitted, or a retried write), and no handover caused
    more duplicates than ``max_uncommitted`` (the README's bound)."""
    by_source: dict[tuple[int, int], list[Result]] = defaultdict(list)
    for r in d.results:
        if r.source is not None:
            by_source[r.source].append(r)
    acks = acks_by_record(d.traces)
    causes = duplicate_causes(d.traces)
    from_handover: Counter[tuple[str, int, float]] = Counter()
    pids: dict[str, int] = {}
    violations, retries, total = [], 0, 0
    for source, results in sorted(by_source.items()):
        if len(results) < 2:
            continue
        total += len(results) - 1
        known = causes.by_source.get(source, [])
        used, unexplained = _explain(results, acks, known)
        if unexplained:
            why = ", ".join(f"{c.how} of pid {c.pid} at {c.at:.3f}" for c in known) or "none"
            violations.append(
                f"prompt {source[0]}:{source[1]} ({results[0].id}) has {len(results)} results; without a "
                f"cause: {', '.join(unexplained)}; causes in the traces: {why}"
            )
        for cause in used:
            if cause.kind == "retry":
                retries += 1
            else:
                from_handover[(cause.proc, source[0], cause.at)] += 1
                pids[cause.proc] = cause.pid
    violations += [
        f"pid {pids[proc]} gave up partition {p} at {at:.3f} and {n} of its prompts were generated again, "
        f"over max_uncommitted {d.max_uncommitted}"
        for (proc, p, at), n in sorted(from_handover.items())
        if n > d.max_uncommitted
    ]
    worst = max(from_handover.values(), default=0)
    inflight = max(causes.in_flight.values(), default=0)
    return _check(
        "duplicates_within_bound",
        violations,
        f"{total} duplicate generations, each with a cause: {total - retries} from {len(from_handover)} of "
        f"{len(causes.in_flight)} handovers with results uncommitted (at most {worst} from one, bound "
        f"{d.max_uncommitted}; at most {inflight} uncommitted at one), {retries} from retried writes",
        f"{len(violations)} duplicates without a cause or handovers over the bound ({total} duplicates)",
    )


def check_topics(d: AuditData) -> Check:
    """``topics_cover_every_prompt``: on the raw completions and dead-letter topics (before the
    export removes duplicates), every valid id has a result, over-context ids an error, and no
    result is of an id the input does not hold."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for r in d.results:
        kinds[r.id].add(r.kind)
    violations = [f"id {i} has no result on the topics" for i in sorted(d.valid_ids - set(kinds))]
    violations += [f"id {i} has a result but is not a valid input" for i in sorted(set(kinds) - d.valid_ids)]
    violations += [
        f"over-context id {i} has no error record"
        for i in sorted(d.over_context_ids)
        if "error" not in kinds[i]
    ]
    return _check(
        "topics_cover_every_prompt",
        violations,
        f"{len(kinds)} ids on the completions and dead-letter topics, every valid one",
        f"{len(violations)} ids wrong on the topics",
    )


def check_recovered(d: AuditData) -> Check:
    """``pipeline_recovered``: no process exited on its own, each stopped cleanly on SIGTERM, the
    pipeline drained (within the load-scaled limit)."""
    return _check(
        "pipeline_recovered",
        list(d.run_problems),
        "no process exited on its own, every SIGTERM exit 0, drained",
        f"{len(d.run_problems)} problems of the pipeline",
    )


def check_harness(d: AuditData) -> Check:
    """``harness_on_time`` (the harness, not the product): every fault was injected on time and
    undone as planned."""
    return _check(
        "harness_on_time",
        list(d.harness_problems),
        "every fault injected on time and undone as planned",
        f"{len(d.harness_problems)} problems of the harness",
    )


PRODUCT_CHECKS: Final = (
    check_bad_lines,
    check_prompts_exactly_once,
    check_topics,
    check_dataset,
    check_generate_commits,
    check_sink_commits,
    check_s3_contiguous,
    check_duplicates,
    check_recovered,
)
"""The product's guarantees."""
HARNESS_CHECKS: Final = (check_harness,)
"""Whether the audit did what it planned: a failure here says nothing about the product."""
HARNESS_NAMES: Final = frozenset({"harness_on_time"})


def audit(d: AuditData) -> list[Check]:
    """Run every check on ``d``: the product's, then the harness's."""
    return [check(d) for check in PRODUCT_CHECKS] + [check(d) for check in HARNESS_CHECKS]


def harness_check(name: str) -> bool:
    """Whether check ``name`` judges the harness, not the product."""
    return name in HARNESS_NAMES
