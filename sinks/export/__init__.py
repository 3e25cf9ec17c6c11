"""The dataset export: ``python -m sinks.export --run RUN --to DIR|s3://bucket/prefix``.

Reads every object the sink wrote for a run (:mod:`sinks.layout`), checks each against its
metadata (SHA-256 of the body, record count, line offsets) and the objects of each partition
against the topic (offset gaps and overlaps, see *Coverage*), deduplicates by record id, compares
the ids with the expected ones, and writes the dataset:

* the winners in each ``--format`` (:mod:`sinks.export.formats`, ``docs/export.md``), at most
  ``--shard-records`` rows per shard: ``jsonl`` (the default), ``completions-00000.jsonl.zst`` ...,
  one :class:`~streams.records.CompletionRecord` per line (the bytes as produced), and
  ``errors-00000.jsonl.zst`` ..., the :class:`~streams.records.ErrorRecord` of each id whose
  winning record is an error (dead letters, and records the sink could not decode); ``parquet``
  (typed shards and a dataset card ``README.md``), ``openai-batch`` (OpenAI Batch API output and
  error files), ``chat`` (training-ready conversations, ``--reasoning field|inline|drop``);
* ``manifest.json``: run id, creation time, counts by ``finish_reason``, by quality flag and by
  ``attempt``, token totals, duplicate counts, conflicts, foreign records, expected/missing/
  unexpected ids (lists capped by ``--list-cap``), the formats, per-shard format, kind, record
  counts and SHA-256 (of the shard file as stored), and what was checked in the source objects.

Deduplication
    Records of other runs are left out first (*Foreign records*). Per id, the record of the latest
    ``attempt`` wins (a re-published prompt's new generation replaces the old one); within an
    attempt a completion beats an error; then the earliest Kafka offset wins (then topic,
    partition, for a deterministic order). Records of one id whose
    prompts differ (:func:`streams.records.prompt_identity`: messages, tools and params) are a
    *conflict*: two different prompts share the id. Each is reported with both sources
    (topic/partition/offset and attempt) and the export fails; a winner is still written.

Expected ids
    From the prompts topic (default; read ``read_committed`` from the beginning up to the end
    offsets taken at start) or from input files (``--input``, any number: files, globs, ``-``,
    ``s3://`` URIs and globs, plain, gzip or zstandard, opened with :mod:`streams.inputs` and
    parsed with :mod:`streams.inputs.formats` as the producer does). An input that cannot be read
    (missing, corrupt compressed data) is an error (exit 2). An id is *missing* when it has no
    record.

Coverage
    Per partition of every topic in the run folder (and of the configured completions and
    errors topics), the objects must cover the topic's offsets from its first offset still in
    Kafka to its end offset (``read_committed``, i.e. the last stable offset): before the first
    object, between objects and after the last. A hole in offsets is only a *gap* when Kafka
    holds a committed record in it: offsets of transaction markers and aborted records have no
    record (the completions and errors topics are written by an idempotent, non-transactional
    producer, so they have none, but the check does not rely on it); a hole below the partition's
    first offset in Kafka cannot be checked and counts as a gap. ``--no-topic-check`` skips
    Kafka: every hole between objects is then a gap.

Foreign records
    A record in the run's folder whose ``run_id`` is set and is not the run's belongs to another
    run (a prompts topic or folder shared by two runs, ``docs/runs.md``): it is left out of the
    dataset (it neither wins nor conflicts nor counts as present), counted in the manifest
    (``foreign``: count, per run, the first ``--list-cap`` with their sources) and fails the export.

Unreadable or corrupt source objects, gaps, conflicts and foreign records are printed (one line
each, the first 20) and listed in the manifest, and fail the export.

Destination
    The new dataset is built beside the one in place and published in one step (a folder swap
    locally; on ``s3://``, shards under ``<prefix>/export-<id>/`` and ``manifest.json`` written
    last), then the previous dataset's files are deleted: a killed export leaves the old dataset
    or the new one, whole. An export that fails its checks never replaces one that passed them
    (:mod:`~sinks.export.destination`; ``docs/export.md``, "Atomic publication").

Report
    After a successful export (exit 0), its :class:`streams.control.ExportReport` (ids,
    completions, errors, missing, duplicates dropped, destination, host) is written to the run's
    control topic (:mod:`~sinks.export.report`; not with ``--no-topic-check``), where ``kafkagen
    status`` reads it. A Kafka that does not take it is a warning: the dataset is written.

Two passes over the objects keep memory to the id index (about 300 bytes per id) plus one
object; shards are streamed to disk (uploaded per shard for an ``s3://`` destination).

Modules: :mod:`~sinks.export.expected` (expected ids), :mod:`~sinks.export.sources` (listing and
reading the objects), :mod:`~sinks.export.index` (first pass: winners, conflicts, foreign
records), :mod:`~sinks.export.coverage` (holes, gaps, overlaps), :mod:`~sinks.export.destination`
(the destination and its JSON Lines shards), :mod:`~sinks.export.formats` (the formats and
their writers), :mod:`~sinks.export.manifest` (statistics, manifest, terminal
summary), :mod:`~sinks.export.report` (the report on the control topic),
:mod:`~sinks.export.dataset` (:func:`export`), :mod:`~sinks.export.cli` (:func:`main`).

Exit status: 0; 1 when ids are missing (unless ``--allow-missing``), a source object is corrupt
or unreadable, offsets are not covered, ids conflict, or records of another run are in the
folder; 2 on bad arguments, settings or inputs;
3 when Kafka or S3 cannot be reached.
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
