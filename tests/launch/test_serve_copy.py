"""The one-time model copy to a RAM disk (``serve up --copy-model-to``), on real files in a tmp dir."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch.serve.model_copy import MARKER, copy_model
from streams.errors import ConfigError


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "nfs" / "Qwen3-tiny"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    (folder / "model-00001-of-00002.safetensors").write_bytes(os.urandom(300_000))
    (folder / "sub" / "tokenizer.json").write_bytes(os.urandom(50_000))
    return folder


def _copies(folder: Path) -> list[str]:
    """What is in a copy folder but the copy lock file: copies and half copies."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_copies_once_with_progress_then_skips_and_recopies_a_change(model: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm" / "models"
    out = io.StringIO()
    copy = copy_model(model, shm, out=out)
    assert copy == shm / "Qwen3-tiny"
    text = out.getvalue()
    assert "100%" in text and "GB" in text and "model copied to" in text, text  # line progress (no tty)
    tree = _tree(copy)
    assert tree.pop(MARKER)  # written last, recorded sizes and mtimes
    assert tree == _tree(model)
    assert not list(shm.glob(".*partial*"))

    out = io.StringIO()
    assert copy_model(model, shm, out=out) == copy
    assert "up to date" in out.getvalue() and "copied" not in out.getvalue()

    (model / "sub" / "tokenizer.json").write_bytes(b"changed")
    out = io.StringIO()
    copy_model(model, shm, out=out)
    assert "model copied to" in out.getvalue()
    assert (copy / "sub" / "tokenizer.json").read_bytes() == b"changed"

    (copy / "config.json").write_text("truncated")  # the copy damaged: its size no longer matches
    out = io.StringIO()
    copy_model(model, shm, out=out)
    assert "model copied to" in out.getvalue()
    assert (copy / "config.json").read_bytes() == (model / "config.json").read_bytes()


def test_a_half_copy_left_by_a_crash_is_not_taken_as_complete(model: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    # a crash mid-copy: the temporary sibling holds some files, no marker; and a final-named
    # folder without a marker (e.g. copied by hand) is not trusted either
    partial = shm / ".Qwen3-tiny.partial-12345"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text((model / "config.json").read_text())
    target = shm / "Qwen3-tiny"
    target.mkdir()
    (target / "config.json").write_text((model / "config.json").read_text())
    out = io.StringIO()
    copy_model(model, shm, out=out)
    assert "model copied to" in out.getvalue()
    assert not partial.exists()
    assert json.loads((target / MARKER).read_text())["source"] == str(model.resolve())
    assert {k for k in _tree(target) if k != MARKER} == set(_tree(model))


def test_not_enough_space_names_needed_and_free_and_the_fix(model: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    with pytest.raises(ConfigError) as err:
        copy_model(model, shm, free_bytes=lambda _path: 1000, out=io.StringIO())
    message = str(err.value)
    needed = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    assert f"needs 0.00 GB ({needed} bytes)" in message and "has only 0.00 GB (1000 bytes) free" in message
    assert str(shm.resolve()) in message and "--copy-model-to" in message and "remount" in message
    assert not (shm / "Qwen3-tiny").exists() and not list(shm.glob(".*partial*"))


def test_the_model_path_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a folder"):
        copy_model(tmp_path / "missing", tmp_path / "shm", out=io.StringIO())


def test_a_symlink_loop_or_a_dangling_link_is_named_not_a_traceback(model: Path, tmp_path: Path) -> None:
    (model / "sub" / "loop").symlink_to("..")
    with pytest.raises(ConfigError, match="symlink loop"):
        copy_model(model, tmp_path / "shm", out=io.StringIO())
    (model / "sub" / "loop").unlink()
    (model / "sub" / "gone.bin").symlink_to(tmp_path / "no-such-blob")
    with pytest.raises(ConfigError, match=r"gone\.bin"):
        copy_model(model, tmp_path / "shm", out=io.StringIO())
    assert _copies(tmp_path / "shm") == []  # nothing copied, no half copy


def test_a_write_error_mid_copy_is_named_and_leaves_no_half_copy(model: Path, tmp_path: Path) -> None:
    # A real write error mid-copy: the copy runs in a process whose files may not pass 100 KB
    # (RLIMIT_FSIZE, SIGXFSZ ignored: write() fails with EFBIG), as a RAM disk that fills up
    # fails with ENOSPC (the message then says "ran out of space"; checked by hand on a 1 MB tmpfs).
    shm = tmp_path / "shm"
    script = (
        "import resource, signal, sys; from pathlib import Path\n"
        "from launch.serve.model_copy import copy_model\n"
        "from streams.errors import ConfigError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
        "try:\n"
        "    copy_model(Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "except ConfigError as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script, str(model), str(shm)], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "copying" in done.stdout and "failed" in done.stdout and "half copy is removed" in done.stdout
    assert _copies(shm) == []
