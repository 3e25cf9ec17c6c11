"""The sink's test hook: pause at a named point so a test can SIGKILL the sink exactly there.

``KAFKAGEN_SINK_TEST_PAUSE=<point>[:<n>]`` makes the sink log ``KAFKAGEN_SINK_TEST_PAUSED`` and
sleep for an hour the n-th time (default 1st) it reaches ``<point>``:

* ``mid_batch``: a batch holds half of ``flush_records``, nothing uploaded;
* ``during_upload``: after a multipart part was uploaded and before the conditional complete (for
  a single ``PutObject``, just before it is sent);
* ``after_upload``: the object exists, its offsets are not committed.

Unset (the default), the hook does nothing. It exists for tests only
(tests/sinks/test_s3_sink.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

from streams.errors import ConfigError

__all__ = ["PAUSE_ENV", "PAUSE_MARKER", "PAUSE_POINTS", "TestPause"]

log = logging.getLogger("kafkagen.sink")

PAUSE_ENV: Final = "KAFKAGEN_SINK_TEST_PAUSE"
PAUSE_MARKER: Final = "KAFKAGEN_SINK_TEST_PAUSED"
PAUSE_POINTS: Final = ("mid_batch", "during_upload", "after_upload")


class TestPause:
    """The ``KAFKAGEN_SINK_TEST_PAUSE`` hook (module docstring): a no-op unless configured.

    Args:
        spec: ``<point>[:<n>]``, or ``None``/empty for no pause.

    Raises:
        ConfigError: an unknown point or a malformed count.
    """

    __test__ = False  # not a pytest class

    def __init__(self, spec: str | None) -> None:
        self.point: str | None = None
        self.nth = 1
        self._hits = 0
        self._lock = threading.Lock()
        if not spec:
            return
        point, _, nth = spec.partition(":")
        if point not in PAUSE_POINTS or (nth and not nth.isdigit()):
            raise ConfigError(f"{PAUSE_ENV}={spec!r}: expected one of {', '.join(PAUSE_POINTS)}[:<n>]")
        self.point, self.nth = point, int(nth or 1)

    def __call__(self, point: str, detail: str) -> None:
        """Sleep for an hour if this is the configured point's n-th hit (blocks the caller's thread)."""
        if point != self.point:
            return
        with self._lock:
            self._hits += 1
            hit = self._hits == self.nth
        if hit:
            log.warning("%s point=%s %s", PAUSE_MARKER, point, detail)
            for handler in logging.getLogger().handlers:
                handler.flush()
            time.sleep(3600)
