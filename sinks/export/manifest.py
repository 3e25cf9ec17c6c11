"""The export's manifest: the statistics of the written records, the manifest itself, and what
is printed on the terminal (a summary, then one line per problem, the first :data:`SHOWN` of each
kind).

What ``manifest.json`` holds and which problems fail an export: docs/export.md, "What an export
checks" and "Problems".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sinks.export.expected import Expected
from sinks.export.index import IdIndex
from sinks.export.sources import Keep, Source
from streams.records import CompletionRecord, ErrorRecord

__all__ = ["SHOWN", "Tally", "build_manifest", "problem_lines", "summary"]

SHOWN: Final = 20
"""Problems of each kind printed on the terminal (all are in the manifest, up to ``--list-cap``)."""


@dataclass
class Tally:
    """Statistics over the records written (the second pass)."""

    by_finish: Counter[str] = field(default_factory=Counter)
    by_flag: Counter[str] = field(default_factory=Counter)
    by_error: Counter[str] = field(default_factory=Counter)
    """``<stage>:<error_type>`` → errors."""
    by_attempt: Counter[int] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    """``prompt``, ``completion``, ``reasoning`` → tokens."""
    flagged: int = 0
    """completions with at least one quality flag."""
    completions: int = 0
    errors: int = 0

    def completion(self, record: CompletionRecord, attempt: int) -> None:
        """Count one written completion."""
        self.completions += 1
        self.by_attempt[attempt] += 1
        self.by_finish[record.finish_reason] += 1
        self.by_flag.update(record.quality)
        self.flagged += bool(record.quality)
        self.tokens["prompt"] += record.usage.prompt_tokens
        self.tokens["completion"] += record.usage.completion_tokens
        self.tokens["reasoning"] += record.usage.reasoning_tokens

    def error(self, record: ErrorRecord, attempt: int) -> None:
        """Count one written error."""
        self.errors += 1
        self.by_attempt[attempt] += 1
        self.by_error[f"{record.stage}:{record.error_type}"] += 1


def _capped(items: list[Any], cap: int, key: str = "ids") -> dict[str, Any]:
    return {"count": len(items), key: items[:cap], "truncated": len(items) > cap}


def build_manifest(
    *,
    run_id: str,
    source_uri: str,
    sources: list[Source],
    index: IdIndex,
    tally: Tally,
    expected: Expected | None,
    allow_missing: bool,
    checked_against_kafka: bool,
    gaps: list[dict[str, Any]],
    coverage_problems: list[str],
    overlaps: list[dict[str, Any]],
    shards: list[dict[str, Any]],
    list_cap: int,
    keep: Keep = "latest",
    regenerations: list[dict[str, Any]] | None = None,
    formats: dict[str, Any] | None = None,
    card: str | None = None,
) -> dict[str, Any]:
    """The manifest (docs/export.md); ``ok`` is false when the export fails.

    Args:
        source_uri: ``s3://bucket/<run folder>``.
        shards: the entries of the written shards, all formats together
            (:attr:`sinks.export.formats.Output.written`: path, format, kind, records, bytes, sha256).
        formats: ``{"formats": [...], "reasoning": <the chat format's --reasoning or None>}``
            (default: ``jsonl`` only).
        card: the dataset card's name when one is written (``README.md``, with ``parquet``).
        keep: which record of an id was kept (:data:`sinks.export.sources.Keep`).
        regenerations: the run's regenerate records (:class:`streams.control.RegenerateRecord` as
            dicts), oldest first.
    """
    unwritten = sorted(index.unwritten)
    present = index.present - set(unwritten)  # what was written, not what the first pass planned
    corrupt = [{"key": s.key, "problem": s.problem} for s in sources if s.problem is not None]
    missing = sorted(expected.ids - present) if expected is not None else []
    # re-published (kafkagen regenerate) and not generated yet: the dataset has an older attempt
    pending = (
        sorted(i for i, a in expected.attempts.items() if i in present and index.latest_attempt.get(i, 0) < a)
        if expected is not None
        else []
    )
    unexpected = sorted(present - expected.ids) if expected is not None else []
    foreign_count = index.foreign_count
    failed = bool(
        corrupt
        or unwritten
        or gaps
        or coverage_problems
        or index.conflicts
        or foreign_count
        or ((missing or pending) and not allow_missing)
    )
    return {
        "run_id": run_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": not failed,
        "source": {
            "s3": source_uri,
            "objects": len(sources),
            "lines": index.lines_total,
            "lines_by_kind": dict(sorted(index.lines_by_kind.items())),
            "corrupt_objects": corrupt,
            "offsets_checked_against_kafka": checked_against_kafka,
            "offset_gaps": gaps[:list_cap],
            "offset_gaps_count": len(gaps),
            "coverage_problems": coverage_problems,
            "offset_overlaps": overlaps[:list_cap],
        },
        "foreign": {
            "count": foreign_count,
            "by_run": dict(sorted(index.foreign_runs.items())),
            "items": index.foreign,
            "truncated": foreign_count > len(index.foreign),
        },
        "records": {
            "ids": len(present),
            "completions": tally.completions,
            "errors": tally.errors,
        },
        "by_attempt": {str(a): n for a, n in sorted(tally.by_attempt.items())},
        "attempts": {
            "keep": keep,
            "records": {str(a): n for a, n in sorted(index.lines_by_attempt.items())},
            "kept": {str(a): n for a, n in sorted(tally.by_attempt.items())},
            "regenerations": regenerations or [],
        },
        "by_finish_reason": dict(sorted(tally.by_finish.items())),
        "by_quality_flag": dict(sorted(tally.by_flag.items())),
        "flagged_completions": tally.flagged,
        "errors_by_type": dict(sorted(tally.by_error.items())),
        "tokens": {k: tally.tokens[k] for k in ("prompt", "completion", "reasoning")},
        "duplicates": index.duplicates(),
        "conflicts": _capped(index.conflicts, list_cap, "items"),
        "expected": None
        if expected is None
        else {"source": expected.source, "ids": len(expected.ids), "unreadable": expected.unreadable},
        "missing": _capped(missing, list_cap),
        "samples": _samples(expected, missing, list_cap),
        "unwritten": _capped(unwritten, list_cap),
        "pending_attempts": _capped(pending, list_cap),
        "unexpected": _capped(unexpected, list_cap),
        "formats": formats or {"formats": ["jsonl"], "reasoning": None},
        "shards": shards,
        "card": card,
    }


def _samples(expected: Expected | None, missing: list[str], list_cap: int) -> dict[str, Any] | None:
    """``--samples`` runs: samples wanted per prompt, the prompts, and the prompts with fewer
    samples than that (``short``: their prompt ids); None for a run of one completion per prompt."""
    if expected is None or not expected.prompts:
        return None
    short = sorted({expected.prompts[i] for i in missing if i in expected.prompts})
    return {
        "per_prompt": expected.per_prompt,
        "prompts": len(set(expected.prompts.values())),
        "short": _capped(short, list_cap),
    }


def _gap_text(gap: dict[str, Any]) -> str:
    where = f"{gap['topic']}-{gap['partition']} offsets {gap['from']}..{gap['to']} ({gap['where']})"
    return f"{where}: {gap['reason']}"


def problem_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per problem that failed the export (the first :data:`SHOWN` of each kind)."""
    lines: list[str] = []
    src = manifest["source"]

    def listed(title: str, items: list[str], total: int) -> None:
        lines.extend(f"{title}: {item}" for item in items[:SHOWN])
        if total > SHOWN:
            lines.append(f"... and {total - SHOWN} more {title.lower()} (see the manifest)")

    bucket = src["s3"].removeprefix("s3://").split("/", 1)[0]
    listed(
        "CORRUPT object",
        [f"s3://{bucket}/{c['key']}: {c['problem']}" for c in src["corrupt_objects"]],
        len(src["corrupt_objects"]),
    )
    unwritten = manifest.get("unwritten", {"count": 0, "ids": []})
    listed(
        "UNWRITTEN id",
        [
            f"{i}: its record was read in the first pass and its object not in the second"
            for i in unwritten["ids"]
        ],
        unwritten["count"],
    )
    listed("OFFSET GAP", [_gap_text(g) for g in src["offset_gaps"]], src["offset_gaps_count"])
    listed("COVERAGE", list(src["coverage_problems"]), len(src["coverage_problems"]))
    conflicts = manifest["conflicts"]
    listed(
        "CONFLICT",
        [
            f"id {c['id']!r}: different prompts at {_at(c['first'])} and {_at(c['second'])}"
            for c in conflicts["items"]
        ],
        conflicts["count"],
    )
    foreign = manifest["foreign"]
    listed(
        "FOREIGN record",
        [
            f"id {f['id']!r} at {_at(f)}: a {f['kind']} of run {f['run_id']}, not run {manifest['run_id']} "
            "(left out of the dataset; a prompts topic or S3 folder shared by two runs? see docs/runs.md)"
            for f in foreign["items"]
        ],
        foreign["count"],
    )
    return lines


def _at(where: dict[str, Any]) -> str:
    return f"{where['topic']}-{where['partition']}@{where['offset']} (attempt {where['attempt']})"


def summary(manifest: dict[str, Any]) -> str:
    """A few lines for the terminal, then one line per problem."""
    rec = manifest["records"]
    dup = manifest["duplicates"]
    lines = [
        f"run {manifest['run_id']}: {rec['completions']} completions, {rec['errors']} errors "
        f"({manifest['source']['objects']} objects, {manifest['source']['lines']} records read, "
        f"{dup['records_dropped']} duplicates dropped, {dup['older_attempts_dropped']} ids re-generated)",
    ]
    if manifest["expected"] is not None:
        exp, miss = manifest["expected"], manifest["missing"]
        lines.append(
            f"expected {exp['ids']} ids from {exp['source']}: {miss['count']} missing, "
            f"{manifest['unexpected']['count']} unexpected"
        )
        if miss["count"]:
            shown = ", ".join(miss["ids"][:10])
            lines.append(f"missing: {shown}{' ...' if miss['count'] > 10 else ''}")
        pend = manifest["pending_attempts"]
        if pend["count"]:
            shown = ", ".join(pend["ids"][:10])
            lines.append(
                f"PENDING: {pend['count']} ids were re-published (kafkagen regenerate) and their new attempt "
                f"is not generated yet, the dataset holds an older one: {shown}"
                f"{' ...' if pend['count'] > 10 else ''}; run the main job of the run again (or wait for its "
                "consumers and the sink), then export"
            )
    if manifest["source"]["offset_overlaps"]:
        lines.append(f"offset overlaps between objects: {len(manifest['source']['offset_overlaps'])}")
    lines.append(f"finish reasons: {manifest['by_finish_reason']}; tokens: {manifest['tokens']}")
    lines += [
        f"  {s['path']}: {s['records']} records, sha256 {s['sha256'][:16]}..." for s in manifest["shards"]
    ]
    rejected = manifest.get("_rejected")
    if rejected is not None:
        lines.append(
            f"NOT PUBLISHED: this export failed its checks, and the dataset in place passed them: "
            f"{rejected['previous']} ({rejected['previous_ids']} ids, exported at "
            f"{rejected['previous_created_at']}) is left as it was; this export's dataset and manifest "
            f"are at {rejected['kept_at']}"
        )
    else:
        lines.append(f"manifest: {manifest.get('_where', 'manifest.json')}")
    lines += problem_lines(manifest)
    return "\n".join(lines)
