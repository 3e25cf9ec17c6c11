"""Prompt inputs, shared by the producer (``python -m producers.prompts``, which publishes them) and
the export (``python -m sinks.export --input``, which reads their ids to check a run for gaps), so
both accept the same inputs and read the same records from them.

Every name below may be imported from ``streams.inputs`` directly. Which module owns what, and the
inputs themselves: ``docs/inputs.md``.
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
from streams.inputs.samples import MAX_SAMPLES, reseeded, sample_id, sampled
from streams.inputs.template import PromptTemplate, load_template, prompt_template

__all__ = [
    "CHUNK_BYTES",
    "GLOB_CHARS",
    "LAST_TURN_RULES",
    "MAX_SAMPLES",
    "STDIN_IDENTITY_BYTES",
    "Container",
    "CountingRaw",
    "FormatName",
    "InputMapping",
    "InputSpec",
    "LastTurn",
    "MappingOptions",
    "OpenedInput",
    "PromptTemplate",
    "Row",
    "derived_id",
    "detect_format",
    "load_template",
    "normalise",
    "open_input",
    "parse_line",
    "prompt_template",
    "read_rows",
    "reseeded",
    "resolve_inputs",
    "sample_id",
    "sampled",
    "split_s3",
]
