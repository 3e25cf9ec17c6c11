"""The S3 sink: ``python -m sinks.s3`` writes the completions and dead-letter topics to S3, exactly once.

Objects are zstd JSON Lines under :mod:`sinks.layout` keys
(``<prefix>/<run_id>/<topic>/partition=<p>/<topic>+<p>+<start offset>.jsonl.zst``), one folder per
topic, so dead letters land beside completions but never mixed with them.

Guarantee
---------
Every record of the two topics ends up in exactly one object of the run folder, however often
the sink is stopped or killed, and no offset is committed before its record is in S3. It rests on
four rules, the Kafka Connect S3 sink's recipe (docs/kafka.md) plus position
recovery from the objects themselves (as Connect's HDFS sink does from its file names):

1. **Deterministic objects.** An object starts at the first record at or after a *chain
   position* (offset 0, or the end offset + 1 of an existing object) and is cut after
   ``flush_records`` records or ``flush_bytes`` uncompressed bytes, counted from that start;
   the key names only the start offset. Only the idle flush (``idle_flush_s`` of silence on a
   partition) cuts by wall clock; rule 2 makes that safe.
2. **Conditional create.** Every object is written with ``If-None-Match: *`` (``PutObject``, or
   ``CompleteMultipartUpload`` above ``multipart_threshold_bytes``; AWS S3 conditional writes,
   honoured by SeaweedFS, tests/streams/test_storage.py). A 412 means another attempt already
   wrote that start offset: the existing object wins, is never overwritten, and the sink resumes
   after *its* end offset (read from its metadata), seeking the consumer there. Since every writer
   starts at a chain position and each start offset can be created once, objects never overlap
   (two sinks racing on one folder with different batch sizes: tests/sinks/test_s3_sink.py).
3. **Upload, then commit.** ``end + 1`` is committed only after the object exists. A crash in
   between leaves the commit behind S3, which rule 4 absorbs.
4. **Recovery from S3: S3 wins.** On every partition assignment (start-up included) the sink
   lists the partition's folder, reads the end offset of the object with the highest start
   offset and seeks there (to the partition's first offset in Kafka when the folder is empty),
   whatever the group's committed offset says, then commits that position. A commit behind S3
   (expired, lost, or a crash between upload and commit) therefore never re-writes data; a commit
   *ahead* of S3 means objects are gone from this destination (the folder was deleted to re-sink,
   or the bucket, prefix or run id changed): the sink logs a warning naming the folder and the
   offsets, and writes them again from Kafka. No record is skipped because of a commit. (The
   alternative, a group id derived from the destination, would not cover a deleted folder.)
   Offsets Kafka no longer holds (retention) cannot be re-written: a warning names them, and the
   export reports the gap. Multipart uploads left dangling by a killed writer in the folder are
   aborted.

Rebalances, shutdown, crashes
-----------------------------
A cancelled upload's thread may still complete its request later: harmless, by rule 2. SIGTERM
waits up to ``shutdown_deadline_s`` for uploads in flight, discards partial batches and exits 0:
what was not committed is re-read at the next start. Set ``sink.instance_id`` (static membership)
in production: a restarted sink then takes its partitions back at once instead of after
``session_timeout_ms``. A SIGKILL at any point is covered by rules 2-4 (tests/sinks/test_s3_sink.py
kills the sink mid-batch, mid-upload and between upload and commit). Deterministic rotation cannot
shrink batches under memory pressure, so size ``flush_bytes`` for the number of partitions one
sink owns.

The topics it reads are the run's (:mod:`sinks.topics`). Rule 4 makes S3, not the group, the position, so the
committed offsets serve progress and lag reports.

Modules
-------
* :mod:`sinks.layout`: keys, object metadata, the line format (pure);
* :mod:`sinks.lines`: a Kafka record → its body line, undecodable values included (pure);
* :mod:`sinks.batch`: the lines of one object, compressed as they arrive (pure);
* :mod:`sinks.store`: the S3 operations (conditional create, multipart, listing), the one place
  botocore errors become :class:`~streams.errors.StorageError`;
* :mod:`sinks.retrying`: those operations from the event loop, retried, S3's health;
* :mod:`sinks.recovery`: where a partition resumes (rule 4, pure);
* :mod:`sinks.topics`: the topics read, their record types, the consumer group;
* :mod:`sinks.partition` and :mod:`sinks.runner`: consume, batch, upload, then commit;
* :mod:`sinks.metrics`: counters, the status line, Prometheus metrics;
* :mod:`sinks.app`: the faust host (and why faust's agent does not consume);
* :mod:`sinks.pause`: the test hook;
* :mod:`sinks.cli`: the command line; this module is its ``python -m sinks.s3`` entry.
"""

from __future__ import annotations

import sys

from sinks.topics import group_id

__all__ = ["group_id"]

if __name__ == "__main__":
    from sinks.cli import main

    sys.exit(main())
