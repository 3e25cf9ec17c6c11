"""Compatibility: the input formats moved to :mod:`streams.inputs.formats` (the producer and the
export share them). ``bench/`` still imports them from here; new code imports ``streams.inputs``."""

from __future__ import annotations

from streams.inputs.formats import (
    FormatName,
    MappingOptions,
    derived_id,
    detect_format,
    normalise,
    parse_line,
)

__all__ = ["FormatName", "MappingOptions", "derived_id", "detect_format", "normalise", "parse_line"]
