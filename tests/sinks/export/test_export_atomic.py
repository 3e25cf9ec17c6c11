"""A re-export publishes its dataset in one step (``docs/export.md``, "Atomic publication"): the
export SIGKILLed at each step of its write, into a local folder and into an S3 prefix, leaves a
dataset whose manifest describes exactly its shards (the old one, or the new one); a transient
S3 error in the second pass is retried; a read that keeps failing there fails the export, and a
failed export never replaces a dataset that passed its checks; an incomplete run, whole or
SIGKILLed in its second pass, leaves the destination as it was. Real Kafka and S3."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import sinks.export.dataset
import sinks.export.sources
from sinks.export.cli import main
from sinks.layout import run_prefix
from streams.config import Settings
from streams.environment import settings_to_env
from streams.retry import Backoff
from tests.sinks.export.support import export_argv as _argv
from tests.sinks.support import REPO_ROOT, client

pytestmark = [pytest.mark.kafka, pytest.mark.s3]

# A step of the export at which the child SIGKILLs itself: (what to patch, when to kill). The
# patches wrap methods of sinks.export.destination.Destination, or the export's reads of the S3
# objects (the export's own code runs unchanged up to the kill).
KILL_AT = {
    # the second shard handed over: the new dataset half written (uploaded, for S3)
    "mid-pass-2": "publish:2",
    # every shard and the manifest written, nothing published
    "before-publishing": "commit:1",
    # local, a filesystem that cannot exchange: the old folder renamed aside, the new not in place
    "between-the-two-renames": "rename:2",
    # local: swapped, the previous dataset not deleted yet; S3: manifest written, stale shards not
    "after-publishing": "after:1",
}
CHILD = """
import os, signal, sys
import sinks.export.destination as d
step, nth = sys.argv[1].split(":")
nth = int(nth)
calls = {"n": 0}
def kill_on(n):
    calls["n"] += 1
    if calls["n"] == n:
        os.kill(os.getpid(), signal.SIGKILL)
def wrap(name):
    real = getattr(d.Destination, name)
    def patched(self, *a, **k):
        kill_on(nth)
        return real(self, *a, **k)
    setattr(d.Destination, name, patched)
if step in ("publish", "commit"):
    wrap(step)
elif step == "rename":
    d._exchange = lambda a, b: False
    real_rename = os.rename
    def rename(a, b):
        if "kafkagen-previous" in str(a) or "kafkagen-previous" in str(b) or "kafkagen-export-" in str(a):
            kill_on(nth)
        return real_rename(a, b)
    d.os.rename = rename
elif step == "read":  # the nth object read by the export, either pass
    import sinks.export.dataset as ds
    real_read = ds.read_object
    def read(*a, **k):
        kill_on(nth)
        return real_read(*a, **k)
    ds.read_object = read
elif step == "after":
    for name in ("_carry", "_remove_stale_s3"):
        real = getattr(d.Destination, name)
        def patched(self, *a, _real=real, **k):
            if k.get("link") is False or "keep_top" in k:
                kill_on(nth)
            return _real(self, *a, **k)
        setattr(d.Destination, name, patched)
from sinks.export.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _export_killed_at(cfg: Settings, step: str, argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, step, *argv],
        cwd=REPO_ROOT,
        env={**os.environ, **settings_to_env(cfg)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, (step, proc.returncode, proc.stderr[-3000:])


class Dataset:
    """A destination as a reader sees it: its manifest, and every file of it."""

    def __init__(self, cfg: Settings, to: str) -> None:
        self.cfg, self.to = cfg, to
        self.local = not to.startswith("s3://")
        self.prefix = to.removeprefix(f"s3://{cfg.s3.bucket}/")

    def files(self) -> dict[str, bytes]:
        """Every file: its path under the folder or prefix → its bytes."""
        if self.local:
            root = Path(self.to)
            return {
                p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            }
        s3 = client(self.cfg)
        out: dict[str, bytes] = {}
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.cfg.s3.bucket, Prefix=self.prefix + "/"
        ):
            for obj in page.get("Contents", []):
                body = s3.get_object(Bucket=self.cfg.s3.bucket, Key=obj["Key"])["Body"].read()
                out[obj["Key"][len(self.prefix) + 1 :]] = body
        return out

    def check(self) -> dict[str, Any]:
        """The manifest, after checking that it describes the dataset exactly: each listed shard
        is there with its SHA-256, and no other shard of any export is (on S3, none outside the
        listed export folder but those the next export deletes: older export folders)."""
        files = self.files()
        manifest: dict[str, Any] = json.loads(files["manifest.json"])
        listed = {s["path"]: s["sha256"] for s in manifest["shards"]}
        for path, sha in listed.items():
            assert path in files, f"the manifest lists {path}, which is not there"
            assert hashlib.sha256(files[path]).hexdigest() == sha, (
                f"{path} is not the shard the manifest lists"
            )
        top_shards = {p for p in files if "/" not in p and p not in ("manifest.json", "notes.txt")}
        if self.local:
            assert top_shards == set(listed), f"shards beside the listed ones: {top_shards - set(listed)}"
        else:
            assert not top_shards - set(listed)
        return manifest


def _to(cfg: Settings, tmp_path: Path, where: str) -> str:
    return str(tmp_path / "dataset") if where == "local" else f"s3://{cfg.s3.bucket}/{cfg.s3.prefix}-export"


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("step", list(KILL_AT))
def test_an_export_killed_at_any_step_leaves_a_whole_dataset(
    cfg: Settings, run: Path, tmp_path: Path, where: str, step: str
) -> None:
    if where == "s3" and step == "between-the-two-renames":
        pytest.skip("a local folder's step")
    to = _to(cfg, tmp_path, where)
    dataset = Dataset(cfg, to)
    assert main(_argv(cfg, to, run, "--allow-missing", "--shard-records", "1")) == 0
    if where == "local":
        (tmp_path / "dataset" / "notes.txt").write_text("mine")
    old = dataset.check()
    assert len(old["shards"]) == 5

    _export_killed_at(cfg, KILL_AT[step], _argv(cfg, to, run, "--allow-missing", "--shard-records", "3"))
    if step == "between-the-two-renames":  # the folder is missing: the old dataset lies aside, whole
        assert not Path(to).exists()
        (aside,) = tmp_path.glob(".dataset.kafkagen-previous-export-*")
        assert Dataset(cfg, str(aside)).check() == old
        assert (aside / "notes.txt").read_text() == "mine"
    else:
        after_kill = dataset.check()
        new_layout = len(after_kill["shards"]) == 3
        assert new_layout == (step == "after-publishing"), "published exactly when the step says so"
        if where == "local":
            assert (tmp_path / "dataset" / "notes.txt").read_text() == "mine"

    assert main(_argv(cfg, to, run, "--allow-missing", "--shard-records", "2")) == 0
    final = dataset.check()
    assert [s["records"] for s in final["shards"]] == [2, 2, 1]
    if where == "local":
        beside = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".dataset."))
        assert beside == [".dataset.kafkagen-export.lock"], "what the killed export left is cleaned up"
        assert (tmp_path / "dataset" / "notes.txt").read_text() == "mine"
    else:
        folders = {p.split("/")[0] for p in dataset.files() if "/" in p}
        assert folders == {final["shards"][0]["path"].split("/")[0]}, "older export folders are deleted"


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("killed", [False, True], ids=["whole", "killed-in-pass-2"])
def test_an_incomplete_run_leaves_the_destination_as_it_was(
    cfg: Settings,
    run: Path,
    tmp_path: Path,
    where: str,
    killed: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ids 4 and 6 are missing: without --allow-missing the export says what is missing, exits 1
    and writes nothing, whether nothing is in place or a dataset is; SIGKILLed while it reads its
    last object again (its second pass), it has written nothing either."""
    to = _to(cfg, tmp_path, where)
    dataset = Dataset(cfg, to)
    objects = client(cfg).list_objects_v2(Bucket=cfg.s3.bucket, Prefix=run_prefix(cfg.s3.prefix, cfg.run_id))
    last_read = 2 * objects["KeyCount"]  # each object is read once per pass

    def beside() -> list[str]:
        """The files and folders beside a local destination (the lock, staging, a rejected dataset)."""
        return sorted(p.name for p in tmp_path.iterdir())

    def export_incomplete() -> str:
        """The incomplete export (exit 1), or its SIGKILL; what it printed."""
        argv = _argv(cfg, to, run, "--shard-records", "1", "--output-format", "jsonl,parquet")
        if killed:
            _export_killed_at(cfg, f"read:{last_read}", argv)
            return ""
        assert main(argv) == 1
        return capsys.readouterr().out

    def says_what_is_missing(out: str) -> None:
        if not killed:
            assert "expected 7 ids" in out and "missing: id-000004, id-000006" in out, out
            assert (
                f"NOT PUBLISHED: run {cfg.run_id} is incomplete (2 ids missing): nothing was written" in out
            )

    nothing = beside()
    printed = export_incomplete()
    assert dataset.files() == {} and beside() == nothing, "nothing in place: nothing made"
    if where == "local":
        assert not Path(to).exists()
    says_what_is_missing(printed)

    assert main(_argv(cfg, to, run, "--allow-missing")) == 0
    good, around = dataset.files(), beside()
    capsys.readouterr()
    printed = export_incomplete()
    assert dataset.files() == good and beside() == around, "the dataset in place is left as it was"
    assert dataset.check()["ok"] is True
    says_what_is_missing(printed)


def _fail_gets(cfg: Settings, monkeypatch: pytest.MonkeyPatch, *, second_pass_failures: int) -> list[str]:
    """Make the export's S3 client answer SlowDown to the first ``second_pass_failures`` reads of
    the first object read again in the second pass (botocore's own retries do not see these:
    the error is raised before the request). Returns the keys that failed, one per failure."""
    seen: dict[str, int] = {}
    failed: list[str] = []
    target: list[str] = []
    make = sinks.export.dataset.s3_client  # type: ignore[attr-defined]  # the name the export calls

    def before_get(params: dict[str, Any], **_: Any) -> None:
        key = params["Key"]
        if "/manifest.json" in key or key.endswith("manifest.json"):
            return
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= 2 and not target:
            target.append(key)  # the first object of the second pass
        if target and key == target[0] and len(failed) < second_pass_failures:
            failed.append(key)
            raise ClientError(
                {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "GetObject"
            )

    def faulty(settings: Any, **kwargs: Any) -> Any:
        c = make(settings, **kwargs)
        c.meta.events.register("before-parameter-build.s3.GetObject", before_get)
        return c

    monkeypatch.setattr(sinks.export.dataset, "s3_client", faulty)
    monkeypatch.setattr(sinks.export.sources, "READ_BACKOFF", Backoff(initial_s=0.01, max_s=0.02))
    return failed


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_transient_s3_error_in_the_second_pass_is_retried(
    cfg: Settings, run: Path, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    to = _to(cfg, tmp_path, where)
    failed = _fail_gets(cfg, monkeypatch, second_pass_failures=1)
    assert main(_argv(cfg, to, run, "--allow-missing")) == 0
    assert len(failed) == 1, "the fault was injected"
    manifest = Dataset(cfg, to).check()
    assert manifest["records"] == {"ids": 5, "completions": 4, "reused": 0, "errors": 1}
    assert manifest["unwritten"]["count"] == 0


def test_a_read_failing_in_the_second_pass_fails_the_export_and_keeps_the_good_dataset(
    cfg: Settings,
    run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    to = _to(cfg, tmp_path, "local")
    assert main(_argv(cfg, to, run, "--allow-missing")) == 0
    good = Dataset(cfg, to).files()
    capsys.readouterr()

    failed = _fail_gets(cfg, monkeypatch, second_pass_failures=100)
    assert main(_argv(cfg, to, run, "--allow-missing", "--shard-records", "1")) == 1
    out = capsys.readouterr().out
    assert len(failed) == sinks.export.sources.READ_ATTEMPTS, "retried, then given up"
    assert Dataset(cfg, to).files() == good, "the good dataset is left as it was"
    assert (
        "NOT PUBLISHED: this export failed its checks, and the dataset in place passed them: "
        f"{to}/manifest.json" in out
    )
    assert "UNWRITTEN id" in out
    rejected = json.loads((tmp_path / "dataset.rejected" / "manifest.json").read_text())
    assert rejected["ok"] is False
    lost = rejected["unwritten"]["count"]
    assert lost >= 1
    assert rejected["records"]["ids"] == 5 - lost, "the manifest counts what was written"
    assert sum(s["records"] for s in rejected["shards"]) == 5 - lost
