"""Generating again: ``kafkagen regenerate`` (selected prompts of a run) and ``kafkagen replay``
(every prompt, under a new run id) (docs/runs.md).

- :mod:`launch.regenerate.select`: which results a selection picks;
- :mod:`launch.regenerate.plan`: planning and publishing a regeneration;
- :mod:`launch.regenerate.cli`, :mod:`launch.regenerate.replay_cli`: the command lines.
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
