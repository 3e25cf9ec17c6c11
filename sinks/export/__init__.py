"""The dataset export: ``python -m sinks.export --run-id RUN --to DIR|s3://bucket/prefix``.

Reads every object the sink wrote for a run (:mod:`sinks.layout`), checks it against its metadata and
the topic's offsets, deduplicates by record id, compares the ids with the expected ones, and writes
the winners in each ``--output-format`` with a ``manifest.json``, published in one step. The rules
(deduplication, expected ids, coverage, foreign records, destination, report), the exit statuses
(0; 1 when the export fails its checks; 2 on bad arguments, settings or inputs; 3 when Kafka or S3
cannot be reached) and the module map: docs/export.md, "What an export checks".
"""

from __future__ import annotations

from sinks.export.dataset import ExportResult, export
from sinks.export.expected import Expected, prompt_ids_from_inputs, prompt_ids_from_topic
from sinks.export.manifest import problem_lines, summary

__all__ = [
    "Expected",
    "ExportResult",
    "export",
    "problem_lines",
    "prompt_ids_from_inputs",
    "prompt_ids_from_topic",
    "summary",
]
