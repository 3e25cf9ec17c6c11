"""The export's dataset formats (``kafkagen export --output-format``), one module each, behind one
writer interface (:class:`~sinks.export.formats.base.Output`): ``jsonl`` (the default,
:mod:`~sinks.export.formats.jsonl`), ``parquet`` (:mod:`~sinks.export.formats.parquet`, its card
:mod:`~sinks.export.formats.card`), ``openai_batch`` (:mod:`~sinks.export.formats.openai_batch`)
and ``chat`` (:mod:`~sinks.export.formats.chat`); their files: docs/export.md. The names are spelled
as the input side's ``--input-format`` spells its formats (``openai_batch``,
:class:`streams.inputs.FormatName`); ``-`` for ``_`` is taken too (``openai-batch``).

Any number of them are written by one export, from the same winners in one pass; each format's
record → row function is pure (tested without Kafka or S3).
"""

from __future__ import annotations

import importlib
import re
from typing import Final

from sinks.export.destination import Destination
from sinks.export.formats.base import REASONING_MODES, FormatOptions, Output, ReasoningMode

__all__ = [
    "FORMATS",
    "REASONING_MODES",
    "SHARD_NAME",
    "FormatOptions",
    "Output",
    "ReasoningMode",
    "open_outputs",
    "parse_formats",
]

_OUTPUTS: Final[dict[str, tuple[str, str]]] = {
    "jsonl": ("jsonl", "JsonlOutput"),
    "parquet": ("parquet", "ParquetOutput"),
    "openai_batch": ("openai_batch", "OpenAIBatchOutput"),
    "chat": ("chat", "ChatOutput"),
}
"""format → (module of this package, its :class:`Output`), imported when used: pyarrow only loads
for ``parquet``."""
FORMATS: Final[tuple[str, ...]] = tuple(_OUTPUTS)
"""The ``--output-format`` values."""

SHARD_NAME: Final = re.compile(
    r"^(?:(?:completions|errors)-\d{5}\.(?:jsonl\.zst|parquet)|batch-(?:output|errors)-\d{5}\.jsonl"
    r"|chat-\d{5}\.jsonl\.zst)$"
)
"""Names of the shard files of every format: files of the destination named so that the new
manifest does not list are stale shards of an earlier export, and removed."""


def parse_formats(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--output-format`` values (repeated, or comma-separated) → the formats (:data:`FORMATS` names:
    ``openai-batch`` is ``openai_batch``), in the order given, once each; none → ``("jsonl",)``.

    Raises:
        ValueError: an unknown format (the message names the known ones).
    """
    out: list[str] = []
    for value in values:
        for given in (v.strip() for v in value.split(",")):
            name = given.replace("-", "_")
            if name not in _OUTPUTS:
                raise ValueError(f"unknown format {given!r} (known: {', '.join(FORMATS)})")
            if name not in out:
                out.append(name)
    return tuple(out) or ("jsonl",)


def open_outputs(
    formats: tuple[str, ...], dest: Destination, per_shard: int, options: FormatOptions
) -> list[Output]:
    """One :class:`Output` per format, writing to ``dest`` in shards of ``per_shard`` rows.

    Raises:
        ValueError: an unknown format.
    """
    outputs: list[Output] = []
    for name in parse_formats(formats):
        module, attr = _OUTPUTS[name]
        cls: type[Output] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        assert cls.name == name
        outputs.append(cls(dest, per_shard, options))
    return outputs
