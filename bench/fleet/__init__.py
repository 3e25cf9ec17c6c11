"""Fleet benchmark: kafkagen's generation consumers against the old job's client on a
simulated fleet of SGLang servers, in one run.

Setup
-----
* **Fleet**: ``--servers`` (7) SGLang-API simulators with the default B200 profile (16 slots,
  234–256 tok/s per request at batch 1, ``rate(b) = r1 / (1 + 0.05 (b - 1))``), all in this
  process's event loop, time-scaled by ``--time-scale`` (simulated seconds per wall second).
  They are restarted (fresh counters and warm-up) before each phase.
* **Prompts**: ``--prompts`` (20,000) GSM8K test questions (bundled, cycled), ids
  ``bench-NNNNN``, the default generation parameters (thinking on, ``max_tokens`` 4096). Their
  work is known before the run: the simulator's output is a function of the request's ``rid``,
  and both clients send the consumer's first-attempt ``rid`` (:mod:`bench.analysis`).
* **Ours**: one ``python -m consumers.generate`` process per server, one consumer group, a fresh
  7-partition prompts topic (uuid names). The prompts are published (keyed by id, on the
  partitions the producer's ``--key-by`` would give them: ``--key-by`` here, default balanced)
  only once every consumer holds exactly one partition, so the group's start-up rebalances are
  not timed (they take seconds of wall time, which the time scale would inflate
  to minutes). t0 = the first publish; the end = the last prompt's first answer
  (``CompletionRecord.timings.finished_at``).
* **Baseline**: :mod:`bench.baseline` in its own process: concurrency 48 (a semaphore),
  round-robin, prompts in memory, the same request bodies. t0 = its start; the end = its last
  answer.
* **Strong baseline** (``--phases …,strong``): :mod:`bench.baseline`'s strong mode, the
  best a plain client can do: per server its running limit (from ``/server_info``) plus
  ``--strong-queue`` requests, least-outstanding routing, prompts in memory, the same bodies.
  Timed like the baseline. :mod:`bench.matrix` runs all three over the rate profiles of
  :mod:`bench.rates`.

Measured: makespan (wall and simulated), the ideal makespan, occupancy per server in the steady
state and over the whole run, the consumers' refill delay (a completion → the next request sent,
wall clock) against how long the standing queue lasts, CPU of the machine and of each role, and
the simulator loop's lag. Definitions are in :mod:`bench.analysis`. Run from the repository root::

    .venv/bin/python -m bench.fleet --prompts 20000 --time-scale 5

The time scale matters: the consumer's refill delay is wall-clock (the next prompt is sent from
the prefetch buffer as soon as an answer arrives), while the standing queue lasts
``standing_queue / completion rate`` of *simulated* time, i.e. ``1 / time_scale`` as much wall
time. A high time scale can therefore measure the harness, not the policy; the CLI prints both
figures so a run can be judged on its own. :mod:`bench.matrix` runs real speeds (time scale 1) instead.

Modules: :mod:`.prompts` (the prompts), :mod:`.sim_fleet` (the simulators and the sampler),
:mod:`.kafka_io` (publishing, reading back, the group's assignment), :mod:`.cpu` (CPU
accounting), :mod:`.context` (what phases share and yield), :mod:`.ours` and :mod:`.baselines`
(the phases), :mod:`.report` (figures and tables), :mod:`.run` (a whole run), :mod:`.cli`.
"""

from __future__ import annotations

from bench.fleet.cli import add_phase_arguments, build_parser, main
from bench.fleet.context import PHASES, BenchContext, PhaseOutcome
from bench.fleet.prompts import make_prompts
from bench.fleet.report import PhaseReport, report
from bench.fleet.run import amain, run_phase

__all__ = [
    "PHASES",
    "BenchContext",
    "PhaseOutcome",
    "PhaseReport",
    "add_phase_arguments",
    "amain",
    "build_parser",
    "main",
    "make_prompts",
    "report",
    "run_phase",
]
