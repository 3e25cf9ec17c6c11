"""``python -m launch.run``: the main job, the same as ``kafkagen run`` (:mod:`launch.run.cli`)."""

import sys

from launch.run.cli import run_main

sys.exit(run_main())
