"""``python -m launch.run`` argument checks that fail before anything is started."""

from __future__ import annotations

import pytest

from launch.run import main


@pytest.fixture(autouse=True)
def _no_kafkagen_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("KAFKAGEN_")]:
        monkeypatch.delenv(key)


def test_a_server_that_is_not_an_http_url_stops_the_run_before_the_stack_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["--run-id", "bad-server", "--server", "http://127.0.0.1:30000", "--server", "notaurl"])
    out, err = capsys.readouterr()
    assert rc == 2, "a bad flag is a usage error (streams.cli.ExitCode.USAGE)"
    assert "error: --server 'notaurl' is not an http(s) URL, e.g. http://127.0.0.1:30000" in err
    assert "run bad-server" not in out, "nothing was started"
