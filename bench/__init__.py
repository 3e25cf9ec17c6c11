"""Benchmarks of kafkagen (run from the repository root, e.g. ``python -m bench.fleet``).

Figures and the exact commands are recorded in ``BENCHMARKS.md``.
"""
