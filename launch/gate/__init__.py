"""The run's fleet-wide quality gate seen from outside, ``kafkagen gate``: status, halt, resume.

- :mod:`launch.gate.control`: reading and writing the gate's state on the control topic;
- :mod:`launch.gate.cli`: the command line.
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
