"""``python -m producers.prompts FILE [FILE ...]``: publish prompt files to the prompts topic, exactly once.

The entry point only: the command line is :mod:`producers.cli` (``main``); this module runs it. What
it reads, how it publishes exactly once, resumes, partitions and reports bad lines, and which
module owns each concern: ``docs/producer.md``.
"""

from __future__ import annotations

import sys

__all__: list[str] = []

if __name__ == "__main__":
    from producers.cli import main

    sys.exit(main())
