"""Prompt inputs, shared by the producer (``python -m producers.prompts``, which publishes them) and
the export (``python -m sinks.export --input``, which reads their ids to check a run for gaps), so
both accept the same inputs and read the same records from them.

=============================  ===============================================================
module                         owns
=============================  ===============================================================
:mod:`.resolve`                command-line inputs (files, globs, ``-``, ``s3://`` URIs and
                               globs) → ordered :class:`InputSpec` list
:mod:`.opening`                opening one input for streaming: decompression by magic bytes,
                               the byte count, the input's identity, its container
:mod:`.reading`                an opened input's rows (:func:`read_rows`), one reader for the
                               producer and the export
:mod:`.rows`                   a row (:class:`Row`); the lines of JSON Lines
:mod:`.jsonarray`              the elements of a JSON array, streamed
:mod:`.parquet`                the rows of a Parquet file, by record batches
:mod:`.formats`                rows → :class:`streams.records.PromptRecord` (formats, ids)
:mod:`.fields`                 the checks of messages, tools and generation parameters
:mod:`.bfcl`                   BFCL function definitions → OpenAI tools
:mod:`.sharegpt`               ShareGPT conversations → OpenAI messages, tool calls and tools
:mod:`.answers`                a conversation's last assistant turn as a reference answer
=============================  ===============================================================

Every name below may be imported from ``streams.inputs`` directly.
"""

from __future__ import annotations

from streams.inputs.answers import LAST_TURN_RULES, LastTurn
from streams.inputs.formats import (
    FormatName,
    MappingOptions,
    derived_id,
    detect_format,
    normalise,
    parse_line,
)
from streams.inputs.mapping import InputMapping
from streams.inputs.opening import (
    CHUNK_BYTES,
    STDIN_IDENTITY_BYTES,
    Container,
    CountingRaw,
    OpenedInput,
    open_input,
)
from streams.inputs.reading import read_rows
from streams.inputs.resolve import GLOB_CHARS, InputSpec, resolve_inputs, split_s3
from streams.inputs.rows import Row

__all__ = [
    "CHUNK_BYTES",
    "GLOB_CHARS",
    "LAST_TURN_RULES",
    "STDIN_IDENTITY_BYTES",
    "Container",
    "CountingRaw",
    "FormatName",
    "InputMapping",
    "InputSpec",
    "LastTurn",
    "MappingOptions",
    "OpenedInput",
    "Row",
    "derived_id",
    "detect_format",
    "normalise",
    "open_input",
    "parse_line",
    "read_rows",
    "resolve_inputs",
    "split_s3",
]
