"""Copy a model folder once to a RAM disk (``serve up --copy-model-to /dev/shm/models``).

Servers loading their weights from a network mount took minutes per shard, from RAM under a minute
(issue 12). The copy goes through a temporary sibling renamed at the end, is checked for free space
first, is skipped when a marker file (:data:`MARKER`) says it is identical, and is locked per
target. docs/serve.md, "Model copy".
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from streams.errors import ConfigError

__all__ = ["MARKER", "copy_model", "model_files"]

MARKER = ".kafkagen-copy.json"
_CHUNK = 16 * 1024 * 1024


def model_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Relative path → (size in bytes, mtime in ns) of every file under ``folder`` (symlinks
    followed, as a Hugging Face cache snapshot links to its blobs; the marker itself left out)."""
    files: dict[str, tuple[int, int]] = {}
    seen: set[tuple[int, int]] = set()

    def walk_error(exc: OSError) -> None:
        raise exc

    try:
        for root, dirs, names in os.walk(folder, followlinks=True, onerror=walk_error):
            st = os.stat(root)
            if (st.st_dev, st.st_ino) in seen:  # a symlink back up the tree: os.walk would loop
                raise ConfigError(
                    f"--copy-model-to: {root} links back into the model folder {folder} (a symlink "
                    "loop): remove that link"
                )
            seen.add((st.st_dev, st.st_ino))
            dirs.sort()
            for name in sorted(names):
                path = Path(root) / name
                rel = path.relative_to(folder).as_posix()
                if rel == MARKER:
                    continue
                st = path.stat()
                files[rel] = (st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise ConfigError(
            f"--copy-model-to: cannot read {exc.filename} in the model folder {folder} ({exc.strerror}): "
            "fix it (a dangling symlink, permissions), or serve without --copy-model-to"
        ) from None
    return files


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _complete(target: Path, files: dict[str, tuple[int, int]]) -> bool:
    try:
        recorded = json.loads((target / MARKER).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if {k: tuple(v) for k, v in recorded.items()} != files:
        return False
    for rel, (size, _mtime) in files.items():
        try:
            if (target / rel).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


class _Progress:
    """A tqdm bar in bytes on a terminal; otherwise a plain line every 10% (logs, pipes)."""

    def __init__(self, total: int, label: str, out: TextIO) -> None:
        self.total, self.label, self.out, self.done, self._next = total, label, out, 0, 0.1
        self.bar: Any = None
        if out.isatty():
            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=out)
        else:
            print(f"{label}: {_gb(total)} to copy", file=out, flush=True)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        while self.total and self.done / self.total >= self._next - 1e-9:
            print(
                f"{self.label}: {self._next:.0%} ({_gb(self.done)} of {_gb(self.total)})",
                file=self.out,
                flush=True,
            )
            self._next += 0.1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def copy_model(
    source: Path,
    dest_dir: Path,
    *,
    free_bytes: Callable[[Path], int] | None = None,
    out: TextIO | None = None,
) -> Path:
    """Copy the model folder ``source`` to ``dest_dir/<source name>`` unless an identical copy
    is there (docs/serve.md, "Model copy"); return the copy's path.

    Args:
        source: the model folder (weights, config, tokenizer).
        dest_dir: where copies live, e.g. ``/dev/shm/models`` (created).
        free_bytes: bytes free under a folder (default: ``shutil.disk_usage(...).free``); the
            tests pass a function to play a full disk.
        out: where the progress goes (default stderr).

    Raises:
        ConfigError: ``source`` is not a folder, or ``dest_dir`` lacks the space (needed and free
            bytes named, with the fix); a file of ``source`` cannot be read (a dangling symlink, a
            symlink loop); the copy failed (e.g. the disk filled up meanwhile: the half copy is
            removed).
    """
    out = out or sys.stderr
    source = source.expanduser().resolve()
    if not source.is_dir():
        raise ConfigError(
            f"--copy-model-to: the model path {source} is not a folder; copy needs a local model folder"
        )
    dest_dir = dest_dir.expanduser()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest_dir = dest_dir.resolve()
    target = dest_dir / source.name
    if target == source:
        return target
    # One copy at a time per target (two `serve up` at once, or two fleets sharing a RAM disk):
    # the second waits, then finds the copy complete, instead of deleting the first's partial.
    with open(dest_dir / f".{source.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"another process is copying {source.name} to {dest_dir}: waiting for it",
                file=out,
                flush=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _copy(source, dest_dir, target, free_bytes, out)


def _copy(
    source: Path, dest_dir: Path, target: Path, free_bytes: Callable[[Path], int] | None, out: TextIO
) -> Path:
    files = model_files(source)
    if _complete(target, files):
        print(f"model copy {target} is up to date ({len(files)} files): not copying", file=out, flush=True)
        return target
    for stale in dest_dir.glob(f".{source.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a crashed copy: never complete
    if target.exists():
        shutil.rmtree(target)  # an older or incomplete copy
    needed = sum(size for size, _ in files.values())
    free = (free_bytes or (lambda p: shutil.disk_usage(p).free))(dest_dir)
    if needed > free:
        raise ConfigError(
            f"the model {source} needs {_gb(needed)} ({needed} bytes) but {dest_dir} has only "
            f"{_gb(free)} ({free} bytes) free: free space there, grow the RAM disk (e.g. "
            f"`mount -o remount,size=64G /dev/shm`), or give another --copy-model-to (or none: the "
            f"servers then read {source})"
        )
    temp = dest_dir / f".{source.name}.partial-{os.getpid()}"
    temp.mkdir()
    progress = _Progress(needed, f"copy {source.name} to {dest_dir}", out)
    try:
        for rel in files:
            src, dst = source / rel, temp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with src.open("rb") as fin, dst.open("wb") as fout:
                while chunk := fin.read(_CHUNK):
                    fout.write(chunk)
                    progress.update(len(chunk))
            shutil.copystat(src, dst)
        marker = {"source": str(source), "files": {k: list(v) for k, v in files.items()}}
        (temp / MARKER).write_text(json.dumps(marker, indent=1) + "\n")  # last: the copy is complete
        temp.rename(target)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise ConfigError(
            f"--copy-model-to: copying {exc.filename or source} to {dest_dir} failed ({exc.strerror}); "
            "the half copy is removed. "
            + (
                f"{dest_dir} ran out of space: free space there or grow the RAM disk"
                if exc.errno == errno.ENOSPC
                else "fix the cause and start again"
            )
        ) from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        progress.close()
    print(f"model copied to {target} ({_gb(needed)}, {len(files)} files)", file=out, flush=True)
    return target
