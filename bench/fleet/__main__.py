"""``python -m bench.fleet``: the command line of :mod:`bench.fleet.cli`."""

from __future__ import annotations

import sys

from bench.fleet.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
