"""Scaling a running run, ``kafkagen scale``: its fleet of servers and its partition count.

- :mod:`launch.scale.policy`: the fleet's programs and what a change means;
- :mod:`launch.scale.control`: changing a run's fleet on its control topic;
- :mod:`launch.scale.watch`: the main job following those changes;
- :mod:`launch.scale.cli`: the command line.
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
