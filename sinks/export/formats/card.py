"""The dataset card: ``README.md`` beside the Parquet shards, written from the manifest.

A Hugging Face dataset card: YAML front matter whose ``configs`` name the shards (so ``load_dataset``
on the folder, or a Hub repository of it, finds them), then the run id, the manifest's counts, the
files, how to load them and what each column means. It carries :data:`MARKER`, so a stale card of
an earlier export is removed (:func:`is_ours`) and a ``README.md`` of your own is not: docs/export.md,
"parquet".
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from sinks.export.formats.parquet import Column

__all__ = ["CARD_NAME", "MARKER", "card", "is_ours"]

CARD_NAME: Final = "README.md"
MARKER: Final = "<!-- kafkagen export: dataset card, rewritten by every export with --format parquet -->"


def is_ours(head: bytes) -> bool:
    """Whether a file starting with ``head`` (its first 4 KB) is a card an export wrote."""
    return MARKER.encode() in head


def _counts(title: str, counts: Mapping[str, Any]) -> list[str]:
    if not counts:
        return [f"- {title}: none"]
    return [f"- {title}: " + ", ".join(f"`{k}` {v}" for k, v in counts.items())]


def _columns(columns: tuple[Column, ...]) -> list[str]:
    lines = ["| column | type | meaning |", "| --- | --- | --- |"]
    for c in columns:
        null = ", nullable" if c.nullable else ""
        lines.append(f"| `{c.name}` | {c.type}{null} | {c.description} |")
    return lines


def card(manifest: Mapping[str, Any]) -> str:
    """The card's text (docs/export.md, "parquet") for ``manifest``
    (:func:`sinks.export.manifest.build_manifest` with its ``shards``)."""
    from sinks.export.formats.parquet import COMPLETION_COLUMNS, ERROR_COLUMNS  # pyarrow: only with parquet

    parquet = [s for s in manifest["shards"] if s.get("format") == "parquet"]
    kinds = [k for k in ("completions", "errors") if any(s["kind"] == k for s in parquet)]
    # the shards' folder: none in a local folder, this export's own under an s3:// prefix
    folder = posixpath.dirname(parquet[0]["path"]) + "/" if parquet and "/" in parquet[0]["path"] else ""
    front = ["---", "configs:"]
    for n, kind in enumerate(kinds):
        front += [f"- config_name: {kind}", f'  data_files: "{folder}{kind}-*.parquet"']
        if n == 0:
            front.append("  default: true")
    if not kinds:
        front[-1] = "configs: []"
    front += ["tags:", "- kafkagen", "- synthetic", "---", ""]
    rec, tokens = manifest["records"], manifest["tokens"]
    run_id = manifest["run_id"]
    body = [
        MARKER,
        "",
        f"# kafkagen run `{run_id}`",
        "",
        f"Exported by `kafkagen export` at {manifest['created_at']} from {manifest['source']['s3']}"
        + ("" if manifest["ok"] else " (**the export failed its checks**: see `manifest.json`)")
        + ". One record per prompt id: the latest attempt's completion, else its dead letter "
        f"(`--keep {manifest['attempts']['keep']}`).",
        "",
        "## Counts",
        "",
        f"- ids: {rec['ids']}; completions: {rec['completions']}; errors: {rec['errors']}",
        f"- missing ids: {manifest['missing']['count']}; flagged completions: "
        f"{manifest['flagged_completions']}",
        *_counts("by finish_reason", manifest["by_finish_reason"]),
        *_counts(
            f"by quality class (of {manifest['quality']['results']} records)", manifest["quality"]["classes"]
        ),
        *_counts("by attempt", manifest["by_attempt"]),
        *_counts("errors by type", manifest["errors_by_type"]),
        f"- tokens: prompt {tokens['prompt']}, completion {tokens['completion']} "
        f"(of which reasoning {tokens['reasoning']})",
        "",
        "`manifest.json` has every count, the checks made on the source and the SHA-256 of each file.",
        "",
        "## Files",
        "",
        *(f"- `{s['path']}` ({s['format']}): {s['records']} {s['kind']}" for s in manifest["shards"]),
        "",
        "## Loading",
        "",
        "```python",
        "import datasets",
        f'completions = datasets.load_dataset("parquet", data_files="{folder}completions-*.parquet", '
        'split="train")',
        "```",
        "",
        "`messages`, `tools`, `tool_calls`, `params` and `metadata_extra` are JSON strings "
        "(`json.loads`): their shapes vary from row to row, and one schema holds for every shard. "
        "Token counts are tokens of the served model's tokenizer; times are seconds, instants Unix "
        "epoch seconds (UTC).",
        "",
        "## Columns of `completions-*.parquet`",
        "",
        *_columns(COMPLETION_COLUMNS),
        "",
        "## Columns of `errors-*.parquet`",
        "",
        *_columns(ERROR_COLUMNS),
        "",
    ]
    return "\n".join(front + body)
