"""``python -m producers.prompts FILE [FILE ...]``: publish prompt files to the prompts topic, exactly once.

Inputs are local ``.jsonl`` files (``.json`` files that hold JSON Lines too), JSON array files
(``[{...}, ...]``, streamed element by element), gzip or zstandard compressed files (detected from
their first bytes, whatever their name), local Parquet files, folders of any of them
(:mod:`streams.inputs.resolve`), ``-`` for stdin, ``s3://bucket/key`` objects, and globs of
either (``data/*.jsonl``, ``s3://bucket/prompts/*.jsonl.zst``).
Blank lines are skipped; a JSON array whose structure is broken stops its input (exit 2).
The Kafka key of a record is its id; a re-run with the same run id continues after the last
committed transaction; bad rows and duplicate ids are reported, not published.

This module is the entry point only; each concern has its module:

=============================  ===============================================================
module                         owns
=============================  ===============================================================
:mod:`producers.cli`           the command line: flags, settings, exit status, ``main``
:mod:`producers.publisher`     publishing inputs in transactions, exactly once across crashes
:mod:`producers.progress`      resume points: the progress topic, input identity and content checks
:mod:`producers.reading.reader`        the reader thread: chunks read and parsed ahead of the publisher
:mod:`producers.reading.maker`         input line → ``(id, key, value, partition)`` or a rejection
:mod:`producers.partitioning`  which partition a record goes to (``--key-by``)
:mod:`producers.reading.limits`        how big a record and a line may be
:mod:`producers.reading.ids`           duplicate ids within one invocation
:mod:`producers.reading.badlines`      the bad-lines report
:mod:`producers.ownership`     refusing a prompts topic of another run
:mod:`producers.transactions`  what aiokafka keeps private about a failed transaction
:mod:`producers.results`       counts per input and the summary line
:mod:`streams.inputs`          resolving, opening and reading inputs (JSON Lines, JSON arrays,
                               Parquet); rows → prompt records (formats)
:mod:`streams.runs.naming`          the progress key and the transactional id of an input
=============================  ===============================================================

The command line itself is :mod:`producers.cli` (``main``); this module only runs it.
"""

from __future__ import annotations

import sys

__all__: list[str] = []

if __name__ == "__main__":
    from producers.cli import main

    sys.exit(main())
