"""What a run is doing and what runs exist: ``kafkagen status``, ``kafkagen runs`` and the dashboard.

- :mod:`launch.status.collect`: one run's status read from Kafka and S3; :mod:`launch.status.shape`
  its shape, :mod:`launch.status.view` its text;
- :mod:`launch.status.runs`: the runs Kafka and S3 know, with :mod:`launch.status.runs_shape` and
  :mod:`launch.status.runs_view`;
- :mod:`launch.status.dashboard`: the live web page; :mod:`launch.status.cli`,
  :mod:`launch.status.runs_cli`: the command lines (docs/status.md, docs/dashboard.md).
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
