"""``python -m simulator``: the command line of :mod:`simulator.cli` (exit status 0 after a
signal, 1 after a crash fault, 2 for a bad configuration)."""

from __future__ import annotations

import sys

from simulator.cli import build_parser, main, profile_from_args, serve

__all__ = ["build_parser", "main", "profile_from_args", "serve"]

if __name__ == "__main__":
    sys.exit(main())
