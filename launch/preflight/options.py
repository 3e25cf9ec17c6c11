"""The preflight as ``run`` and ``serve up`` run it: its options, parsed once by the command lines
(:mod:`launch.preflight.cli`), and :func:`run_preflight_for`, which runs it with them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the preflight's machinery loads when it runs: ``--help`` stays fast
    from launch.preflight.sample import Sample
    from streams.config import GenerationSettings, Settings

__all__ = [
    "DEFAULT_SAMPLE",
    "DEFAULT_SEED",
    "GATE_OFF",
    "PREFLIGHT_TIMEOUT_S",
    "PreflightOptions",
    "run_preflight_for",
]

DEFAULT_SAMPLE: Final = 32
"""Prompts per preflight (each sent to every server)."""
DEFAULT_SEED: Final = 0
"""The preflight's seed: of its reservoir (the same input gives the same sample) and of its
requests' sampling seeds (:func:`launch.preflight.check.request_seed`)."""
PREFLIGHT_TIMEOUT_S: Final = 600.0
"""Seconds one request may take by default: the first after a server starts can take minutes."""

GATE_OFF: Final = "the quality gate is off: gate.enabled false"
"""Why the verdict is not enforced when the run's gate is off (the report says it)."""


@dataclass(frozen=True)
class PreflightOptions:
    """The preflight options of ``run`` and ``serve up`` (:func:`preflight_options`).

    Attributes:
        enabled: run it (``--no-preflight``: skip).
        enforce: refuse the run when the gate trips (``--ignore-preflight``: report and go on).
        sample: prompts per preflight (``--preflight-sample``).
        seed: the sample's and the requests' seed (``--preflight-seed``).
        timeout_s: seconds one request may take (``--preflight-timeout``).
        waiver: why the gate is not enforced, for the report (when ``enforce`` is off).
    """

    enabled: bool = True
    enforce: bool = True
    sample: int = DEFAULT_SAMPLE
    seed: int = DEFAULT_SEED
    timeout_s: float = PREFLIGHT_TIMEOUT_S
    waiver: str = "--ignore-preflight"


def run_preflight_for(
    servers: dict[str, str] | Sequence[str],
    generation: GenerationSettings,
    settings: Settings,
    options: PreflightOptions,
    *,
    sample: Sample | None = None,
    skip_hint: str | None = None,
    resend: bool = True,
    echo: Callable[[str], None] = lambda line: print(line, flush=True),
) -> None:
    """The preflight of ``serve up``, ``serve probe`` and ``run``: ``sample`` (default the demo
    prompts) to ``servers`` at ``generation``, judged with ``settings.gate`` (``resend``:
    :func:`launch.preflight.check.run_preflight`'s); with the gate off (``gate.enabled`` false) the
    verdict is reported, not enforced, as the run's consumers will not enforce it either.

    Raises:
        PreflightError: the gate refuses (unless ``options.enforce`` is off).
        UnavailableError: a server did not answer.
    """
    from launch.preflight.check import preflight
    from launch.preflight.sample import demo_sample

    drawn = sample or demo_sample(settings, size=options.sample, seed=options.seed)
    if not settings.gate.enabled and options.enforce:
        options = replace(options, enforce=False, waiver=GATE_OFF)
    preflight(
        servers,
        generation,
        drawn,
        gate=settings.gate,
        timeout_s=options.timeout_s,
        run_id=settings.run_id,
        echo=echo,
        enforce=options.enforce,
        waiver=options.waiver,
        resend=resend,
        skip_hint=skip_hint,
        seed=options.seed,
    )
