"""The sink's test hook (:mod:`sinks.pause`): milliseconds, no services."""

from __future__ import annotations

import pytest

from sinks.pause import TestPause
from streams.errors import ConfigError


def test_pause_hook_is_inert_unless_configured() -> None:
    pause = TestPause(None)
    pause("after_upload", "x")  # returns at once
    assert TestPause("after_upload:3").nth == 3
    for bad in ("after-upload", "mid_batch:x", "nowhere:1"):
        with pytest.raises(ConfigError):
            TestPause(bad)
