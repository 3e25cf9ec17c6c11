"""A batch and its metadata (:mod:`sinks.batch`): milliseconds, no services."""

from __future__ import annotations

import hashlib

from sinks.batch import Batch
from sinks.layout import KEY_SUFFIX, ObjectMeta, iter_body_lines


def test_batch_metadata_describes_its_body() -> None:
    batch = Batch(level=3)
    lines = [f'{{"offset":{o}}}\n'.encode() for o in range(10, 20)]
    for offset, line in zip(range(10, 20), lines, strict=True):
        batch.add(offset, line)
    assert (batch.start, batch.end, batch.count, batch.raw_bytes) == (10, 19, 10, sum(map(len, lines)))
    body, meta = batch.seal()
    assert meta == ObjectMeta(10, 19, 10, hashlib.sha256(b"".join(lines)).hexdigest(), sum(map(len, lines)))
    assert list(iter_body_lines(body)) == lines
    assert KEY_SUFFIX == ".jsonl.zst"
