"""The main job, ``kafkagen run`` (``python -m launch.run``): stack, servers, consumers, sink,
producer, progress, export (docs/main-job.md; a run's names: docs/runs.md).

- :mod:`launch.run.job`: the job's steps (:func:`~launch.run.job.plan_run`, :func:`~launch.run.job.run`);
- :mod:`launch.run.servers`: which servers it starts itself, waiting for the others;
- :mod:`launch.run.prompt_check`, :mod:`launch.run.replays`: what it checks before it starts;
- :mod:`launch.run.progress`: its progress, in prompts, until the run is done;
- :mod:`launch.run.cli`: the command line.
"""

__all__: list[str] = []  # a package of concerns: its modules are imported by name
