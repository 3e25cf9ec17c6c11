"""``python -m sinks.export``: runs :func:`sinks.export.cli.main` (exit statuses: docs/export.md)."""

from __future__ import annotations

import sys

from sinks.export.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
