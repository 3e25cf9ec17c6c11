"""What one invocation of the producer did: counts per input and its closing line."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["InputStats", "RunResult"]


@dataclass
class InputStats:
    """What happened to one input (counts of lines; bytes of the decompressed input)."""

    name: str
    published: int = 0
    skipped: int = 0
    """good lines already published by an earlier run."""
    bad: int = 0
    blank: int = 0
    lines: int = 0
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class RunResult:
    """The totals of one invocation, over all its inputs."""

    inputs: list[InputStats] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        """The sum of :class:`InputStats` field ``name`` over the inputs."""
        return sum(int(getattr(s, name)) for s in self.inputs)

    def summary(self) -> str:
        """The producer's closing line, ``producer: published N, ...`` (not ``summary:``: inside
        ``kafkagen run`` it comes before the progress, and the job's summary ends the run)."""
        rate = self.total("bytes") / self.seconds if self.seconds > 0 else 0.0
        shown = f"{rate / 1e6:.1f} MB/s" if rate >= 1e6 else f"{rate / 1e3:.1f} kB/s"
        return (
            f"producer: published {self.total('published')}, skipped {self.total('skipped')} (already "
            f"published by an earlier run), bad {self.total('bad')}, {self.total('bytes')} bytes in "
            f"{self.seconds:.2f} s ({shown})"
        )
