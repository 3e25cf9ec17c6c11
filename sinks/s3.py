"""The S3 sink: ``python -m sinks.s3`` writes the completions and dead-letter topics to S3, exactly once.

Objects are zstd JSON Lines under :mod:`sinks.layout` keys, one folder per topic; no offset is committed
before its record is in S3. The design (the four rules; rebalances, shutdown and crashes) and the module
map: docs/sink.md. This module is the ``python -m sinks.s3`` entry of :func:`sinks.cli.main`.
"""

from __future__ import annotations

import sys

from sinks.topics import group_id

__all__ = ["group_id"]

if __name__ == "__main__":
    from sinks.cli import main

    sys.exit(main())
