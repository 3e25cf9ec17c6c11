"""``python -m launch.stack``: the same as ``kafkagen stack`` (:mod:`launch.stack.cli`)."""

from __future__ import annotations

import sys

from launch.stack.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
