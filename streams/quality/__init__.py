"""The quality classes: the one definition of the names a run's results are counted under.

A completion carries its quality flags (:class:`QualityFlag`: raised by
:mod:`consumers.quality.flags`, stored in ``CompletionRecord.quality``). A result's *classes*
(:func:`result_classes`) are its flags plus ``degenerate`` when one of them makes it unusable
(:data:`DEGENERATE_FLAGS`), or ``error`` for a dead letter. Every place that counts or shows
quality derives from here: the quality gate and the consumers' reports (``kafkagen status``, the
dashboard), the preflight, ``kafkagen gate`` and ``kafkagen regenerate --where quality=``, the
export's manifest (``quality``), its dataset card and the main job's summary (docs/gate.md,
"Classes"). The core holds it because both the consumers and the export count classes, and
neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final

__all__ = [
    "DEGENERATE_CLASS",
    "DEGENERATE_FLAGS",
    "ERROR_CLASS",
    "QUALITY_CLASSES",
    "QualityFlag",
    "classes_text",
    "counted_classes",
    "degenerate",
    "result_classes",
]


class QualityFlag(StrEnum):
    """The flag names written into ``CompletionRecord.quality``. Values never change."""

    EMPTY_CONTENT = "empty_content"
    REASONING_ATE_BUDGET = "reasoning_ate_budget"
    THINKING_MISSING = "thinking_missing"
    TRUNCATED = "truncated"
    REPETITION_LOOP = "repetition_loop"
    MALFORMED_TOOL_CALL = "malformed_tool_call"
    TEMPLATE_LEAK = "template_leak"
    ECHOED_PROMPT = "echoed_prompt"
    INVALID_JSON = "invalid_json"
    SCHEMA_MISMATCH = "schema_mismatch"
    PATTERN_MISMATCH = "pattern_mismatch"


DEGENERATE_FLAGS: Final = frozenset(
    {
        QualityFlag.EMPTY_CONTENT,
        QualityFlag.REASONING_ATE_BUDGET,
        QualityFlag.REPETITION_LOOP,
        QualityFlag.MALFORMED_TOOL_CALL,
        QualityFlag.TEMPLATE_LEAK,
        QualityFlag.ECHOED_PROMPT,
        QualityFlag.INVALID_JSON,
        QualityFlag.SCHEMA_MISMATCH,
        QualityFlag.PATTERN_MISMATCH,
    }
)
"""Flags that make a completion unusable as a training/eval example (see :func:`degenerate`)."""

ERROR_CLASS: Final = "error"
"""The class of a dead letter (a record of ``<run>.errors``)."""
DEGENERATE_CLASS: Final = "degenerate"
"""The class of a completion with any of :data:`DEGENERATE_FLAGS`."""
QUALITY_CLASSES: Final[tuple[str, ...]] = (
    *(flag.value for flag in QualityFlag),
    ERROR_CLASS,
    DEGENERATE_CLASS,
)
"""Every quality class, in the order the gate judges them: the flags, ``error``, ``degenerate``."""


def degenerate(flags: Iterable[str]) -> bool:
    """Whether a completion with these flags is unusable: any of :data:`DEGENERATE_FLAGS` (no
    answer, a loop, a tool call nobody can execute, template tokens, the question parroted, a
    broken structured answer). ``truncated`` and ``thinking_missing`` alone, and unknown names,
    are not (docs/gate.md, "Unusable: ``degenerate``")."""
    return any(flag in DEGENERATE_FLAGS for flag in flags)


def result_classes(flags: Iterable[str] | None) -> list[str]:
    """The classes of one result: ``["error"]`` for a dead letter (``flags`` None), else the
    completion's quality flags plus ``degenerate`` when one of them makes it unusable."""
    if flags is None:
        return [ERROR_CLASS]
    classes = list(flags)
    if degenerate(classes):
        classes.append(DEGENERATE_CLASS)
    return classes


def counted_classes(counts: Mapping[str, int]) -> dict[str, int]:
    """``{class: results}`` as every report lists it (the status, the manifest's ``quality``, the
    main job's summary, the dataset card): the classes with a count above 0, by name."""
    return {name: n for name, n in sorted(counts.items()) if n > 0}


def classes_text(counts: Mapping[str, int], results: int) -> str:
    """The one line the terminal reports show for ``counts`` (``{class: results}``) of ``results``
    results: ``degenerate 3, truncated 5 (of 10 results)``, or ``none (of 10 results)``
    (:func:`counted_classes`)."""
    shown = ", ".join(f"{name} {n}" for name, n in counted_classes(counts).items()) or "none"
    return f"{shown} (of {results} results)"
