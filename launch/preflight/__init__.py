"""The preflight, ``kafkagen preflight``: a sample of the input sent to every server and judged by
the quality gate before a run (docs/main-job.md, "The preflight").

- :mod:`launch.preflight.sample`: the sample read from the input;
- :mod:`launch.preflight.stats`: what the answers say;
- :mod:`launch.preflight.check`: sending, judging, the verdict;
- :mod:`launch.preflight.cli`: the command line and the options the main job shares.
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
