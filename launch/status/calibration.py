"""How close the projection (:mod:`launch.status.projection`) came on a replayed past run: the
calibration file ``calibration.json`` beside this module, which ``python -m bench.projection DATASET
--calibration launch/status/calibration.json`` writes, and the line ``kafkagen status`` and the
dashboard show from it once a run is past the file's first checkpoint (docs/budgets.md, "How close
it comes").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

__all__ = ["CALIBRATION_FILE", "Calibration", "Check", "Checkpoint", "Replayed", "load_calibration"]

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True)
class Check:
    """One projected total against the past run's real one: ``error`` = (projected - real) / real
    (a fraction, +0.02 for 2% over) and ``held``: whether its 95% interval held the real total."""

    error: float
    held: bool


@dataclass(frozen=True)
class Checkpoint:
    """The projection after ``seen`` of the past run's ``total`` results (``fraction`` of them)."""

    fraction: float
    seen: int
    total: int
    output_tokens: Check
    finish: Check | None = None
    """the wall seconds from the run's start to its finish; None without a rate then."""
    gpu_hours: Check | None = None


def _percent(error: float) -> str:
    """``error`` (a fraction) as a signed whole percent, ``0%`` when it rounds to 0."""
    percent = round(error * 100)
    return f"{percent:+d}%" if percent else "0%"


@dataclass(frozen=True)
class Replayed:
    """How close the projection came at ``checkpoint.fraction`` of the past run ``label``, as
    measured by ``source``: the status document's ``projection.replayed``."""

    label: str
    source: str
    checkpoint: Checkpoint
    summary: str = field(init=False)
    """:meth:`text`, for the dashboard."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary", self.text())

    def text(self) -> str:
        """One line: ``projection at 1% of a replayed past run (LABEL, SOURCE): finish -4%,
        tokens +2%, each inside its interval`` (each total outside its interval says so)."""
        c = self.checkpoint
        checks = [("finish", c.finish), ("tokens", c.output_tokens), ("GPU-hours", c.gpu_hours)]
        shown = [(name, check) for name, check in checks if check is not None]
        parts = [f"{name} {_percent(check.error)}" + ("" if check.held else " (outside its interval)")
                 for name, check in shown]  # fmt: skip
        held = all(check.held for _, check in shown)
        tail = ", each inside its interval" if held else ""
        return (
            f"projection at {c.fraction:.0%} of a replayed past run ({self.label}, {self.source}): "
            f"{', '.join(parts)}{tail}"
        )


@dataclass(frozen=True)
class Calibration:
    """The calibration file: the past run (``label`` in a few words, ``past_run`` in full), the
    ``command`` and repository ``commit`` that replayed it, when (``written_at``, ISO 8601), and the
    ``checkpoints`` in ascending fraction. ``note`` says anything else a reader needs."""

    label: str
    past_run: str
    command: str
    commit: str
    written_at: str
    checkpoints: list[Checkpoint]
    source: str = "bench/projection.py"
    note: str = ""
    rate: str = "from each member's first result on (streams.control.window_rates)"
    """how the replay measured the fleet's rate (the finish and GPU-hours depend on it)."""

    def at(self, fraction: float) -> Replayed | None:
        """The last checkpoint at or below ``fraction`` of a run (results / total), or None before
        the first."""
        passed = [c for c in self.checkpoints if c.fraction <= fraction + 1e-12]
        if not passed:
            return None
        return Replayed(self.label, self.source, max(passed, key=lambda c: c.fraction))

    def encode(self) -> bytes:
        """The file's JSON (indented)."""
        return msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n"


@functools.cache
def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration | None:
    """The calibration file at ``path``; None when it is missing or does not decode (the status
    then shows no replayed accuracy)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=Calibration)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return None
