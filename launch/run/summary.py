"""The main job's closing summary, read from the export's ``manifest.json``
(docs/export.md, "What an export checks")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.config import Settings
from streams.quality import DEGENERATE_CLASS, DEGENERATE_FLAGS, classes_text

__all__ = ["read_manifest", "summary"]


def summary(
    manifest: dict[str, Any],
    wall_s: float,
    occupancy: float | None,
    dataset: str,
    *,
    already_done: bool = False,
    resumed: bool = False,
    after_halt: bool = False,
) -> str:
    """The closing summary, from the export's ``manifest.json`` (docs/export.md, "What an export checks").
    ``after_halt``: this invocation resumed a run its quality gate had halted; the results
    finished before the halt are kept (docs/gate.md), so unusable ones are named. Records of an
    attempt a regeneration superseded are told apart from duplicates (``superseded``)."""
    m = manifest
    records, tokens, dup = m["records"], m["tokens"], m["duplicates"]
    superseded = dup.get("superseded_records", 0)  # absent from older manifests
    expected = (m.get("expected") or {}).get("ids", "?")
    lines = [
        "",
        f"run {m['run_id']}: done in {wall_s:.0f} s",
        f"  prompts      {expected}",
        f"  completions  {records['completions']}"
        + (f" ({records['reused']} reused from another run)" if records.get("reused") else ""),
        f"  errors       {records['errors']}",
        f"  missing      {m['missing']['count']}",
        f"  duplicates   {dup['records_dropped'] - superseded} records dropped by the export",
        *(
            [
                f"  superseded   {superseded} records of {dup['older_attempts_dropped']} ids superseded by a "
                "regeneration (the dataset keeps each id's latest attempt)"
            ]
            if superseded
            else []
        ),
        f"  tokens       prompt {tokens['prompt']}, completion {tokens['completion']}, "
        f"reasoning {tokens['reasoning']}",
    ]
    if already_done:
        lines[1] = (
            f"run {m['run_id']}: already complete (nothing generated now; re-exported in {wall_s:.0f} s)"
        )
    elif resumed:
        lines.append("  tokens/s     - (a resumed run: its tokens were generated over several invocations)")
    else:
        rate = tokens["completion"] / max(wall_s, 1e-9)
        lines.append(f"  tokens/s     {rate:.1f} (completion tokens / wall time)")
    if occupancy is not None:
        lines.append(
            f"  slots busy   {occupancy:.0%} (mean over servers while generating: 100% with requests "
            "queued, else running / running limit)"
        )
    lines.append(f"  finish       {json.dumps(m['by_finish_reason'], sort_keys=True)}")
    quality = m["quality"]
    lines.append(f"  quality      {classes_text(quality['classes'], quality['results'])}")
    lines.append(f"  dataset      {dataset}")
    unusable = {f: n for f, n in quality["classes"].items() if f in DEGENERATE_FLAGS and n}
    if after_halt and unusable:
        flags = ", ".join(f"{f} {n}" for f, n in unusable.items())
        lines.append(
            f"warning: {quality['classes'].get(DEGENERATE_CLASS, 0)} of {records['completions']} "
            f"completions are unusable ({DEGENERATE_CLASS}: {flags}): the results finished at the halted "
            "settings are kept, a resume does not generate them again; filter the dataset on each "
            "record's quality flags, or generate them again with the fix: "
            f"kafkagen regenerate {m['run_id']} --where quality={','.join(unusable)} (with the fixed "
            "--max-tokens N or --thinking)"
        )
    return "\n".join(lines)


def read_manifest(dataset: str, settings: Settings) -> dict[str, Any]:
    """The export's ``manifest.json`` in ``dataset`` (a folder or ``s3://bucket/prefix``)."""
    if dataset.startswith("s3://"):
        from streams.storage import s3_client

        bucket, _, prefix = dataset.removeprefix("s3://").partition("/")
        key = f"{prefix.rstrip('/')}/manifest.json" if prefix else "manifest.json"
        body = s3_client(settings.s3).get_object(Bucket=bucket, Key=key)["Body"].read()
        data = json.loads(body)
    else:
        data = json.loads((Path(dataset) / "manifest.json").read_text())
    assert isinstance(data, dict)
    return data
