"""The export's destination: a local folder or ``s3://bucket/prefix``, the shards written to it,
and publishing a new dataset in one step.

A new dataset is built beside the one in place, which stays whole and readable until the new one
replaces it: locally by one ``renameat2(RENAME_EXCHANGE)`` of a hidden sibling folder (or two
renames where the filesystem cannot exchange), on S3 by writing ``manifest.json`` last. A failed
export (``ok: false``) does not replace one whose manifest says ``ok: true``
(:meth:`Destination.reject`). The steps, crashes and concurrent exports: docs/export.md, "Atomic
publication".
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import zstandard

from streams.errors import ConfigError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "EXPORT_DIR",
    "MANIFEST_NAME",
    "STAGE_PREFIX",
    "Destination",
    "Shards",
    "finish_shard",
    "parse_target",
]

log = logging.getLogger("kafkagen.export")

MANIFEST_NAME: Final = "manifest.json"
STAGE_PREFIX: Final = ".kafkagen-export-"
"""Staging folders of an ``s3://`` destination (under the system's temporary folder)."""
EXPORT_DIR: Final = re.compile(r"^export-\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}$")
"""Names of the folders of one export's shards under an ``s3://`` destination's prefix."""
_RENAME_EXCHANGE: Final = 2
_AT_FDCWD: Final = -100

Ours = Callable[[str, bytes], bool]
"""``(name, first 4 KB) → whether an export wrote this file`` (a shard, the manifest, our card)."""


def _export_id() -> str:
    """``export-<UTC time to the microsecond>-<8 hex digits>``: sorts by start time (two exports
    started in one second too: the one started later deletes the other's folder); unique."""
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
    return f"export-{stamp}.{micros:06d}Z-{secrets.token_hex(4)}"


def parse_target(target: str) -> tuple[str | None, str, Path | None]:
    """Where ``--to`` points, without touching it: ``(bucket, prefix, None)`` for
    ``s3://bucket[/prefix]`` (the prefix without slashes around it), ``(None, "", folder)`` for a
    folder path (made absolute).

    Raises:
        ConfigError: ``target`` is ``s3://`` without a bucket, or an existing file.
    """
    if target.startswith("s3://"):
        bucket, _, prefix = target.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigError(f"--to {target!r}: expected s3://bucket/prefix")
        return bucket, prefix.strip("/"), None
    folder = Path(target).absolute()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--to {target!r} is a file: give a folder")
    return None, "", folder


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (``renameat2`` with ``RENAME_EXCHANGE``);
    ``False`` when this system or filesystem cannot.

    Raises:
        OSError: the exchange failed for another reason (a path missing, permissions).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


class Destination:
    """Where the export writes: a local folder, or ``s3://bucket/prefix`` (docs/export.md).

    Files are written to :meth:`path` and handed over by :meth:`publish` (shards as they close);
    :meth:`commit` puts the whole dataset in place, :meth:`reject` keeps it aside instead;
    :meth:`close` releases what is left.

    Raises (constructor):
        ConfigError: ``target`` is not ``s3://bucket[/prefix]`` or a folder path (:func:`parse_target`).
        OSError: a local folder cannot be created or locked.
    """

    def __init__(self, target: str, client: S3Client | None, ours: Ours) -> None:
        self.target = target
        self.client = client
        self._ours = ours
        self._lock: IO[bytes] | None = None
        self.export_id = _export_id()
        self.bucket, self.prefix, self.folder = parse_target(target)
        if self.folder is None:
            self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX))
        else:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            self._lock = (self.folder.parent / f".{self.folder.name}.kafkagen-export.lock").open("ab")
            fcntl.flock(self._lock, fcntl.LOCK_EX)  # another export into this folder: its turn first
            self._recover()
            self.stage = self.folder.parent / f".{self.folder.name}.kafkagen-{self.export_id}"
            self.stage.mkdir()

    # -- writing ---------------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        """Where to write ``name`` (a shard, the card, the manifest) before it is published."""
        return self.stage / name

    def stored_name(self, name: str) -> str:
        """``name`` as the manifest lists it: relative to the destination (under this export's
        folder for S3)."""
        return name if self.folder is not None else f"{self.export_id}/{name}"

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def where(self, name: str) -> str:
        """Where ``name`` (as :meth:`stored_name` gives it) is once committed."""
        if self.folder is not None:
            return str(self.folder / name)
        return f"s3://{self.bucket}/{self._key(name)}"

    def publish(self, name: str) -> None:
        """Hand over a finished shard: uploaded to this export's S3 folder (and deleted locally);
        a local shard stays in the new dataset's folder."""
        if self.folder is not None:
            return
        assert self.bucket is not None and self.client is not None
        self.client.upload_file(str(self.stage / name), self.bucket, self._key(self.stored_name(name)))
        (self.stage / name).unlink()

    # -- what is in place ------------------------------------------------------------------------

    def previous_manifest(self) -> dict[str, Any] | None:
        """The manifest of the dataset in place, or ``None`` when there is none (or it is not JSON).

        Raises:
            botocore.exceptions.ClientError, BotoCoreError: S3 failed (other than a missing key).
        """
        if self.folder is not None:
            try:
                data = (self.folder / MANIFEST_NAME).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
        else:
            assert self.bucket is not None and self.client is not None
            from botocore.exceptions import ClientError  # here: a --help imports this module

            try:
                data = self.client.get_object(Bucket=self.bucket, Key=self._key(MANIFEST_NAME))["Body"].read()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                    return None
                raise
        try:
            manifest = json.loads(data)
        except ValueError:
            return None
        return manifest if isinstance(manifest, dict) else None

    # -- publishing ------------------------------------------------------------------------------

    def commit(self, names: list[str]) -> None:
        """Put the new dataset in place in one step (docs/export.md), then delete the previous
        one. ``names``: the files beside the shards, in writing order, the manifest last
        (``[README.md, manifest.json]``).

        Raises:
            OSError: a local rename failed (the previous dataset is then still in place).
            botocore.exceptions.ClientError, BotoCoreError: S3 failed (before the manifest is
                written: the previous dataset is in place; after: the new one is, with stale
                shards left for the next export to delete).
        """
        if self.folder is not None:
            self._commit_local()
            return
        assert self.bucket is not None and self.client is not None
        for name in names:
            self.client.upload_file(str(self.stage / name), self.bucket, self._key(name))
        self._remove_stale_s3(keep_top=set(names))

    def reject(self) -> str:
        """Keep the new (failed) dataset aside, the dataset in place untouched; returns where it
        is: a local folder ``<name>.rejected`` beside the destination (replacing an older one), or
        ``<prefix>/export-<id>/`` on S3 with its manifest in it."""
        if self.folder is not None:
            rejected = self.folder.parent / f"{self.folder.name}.rejected"
            shutil.rmtree(rejected, ignore_errors=True)
            os.rename(self.stage, rejected)
            return str(rejected)
        assert self.bucket is not None and self.client is not None
        for entry in sorted(self.stage.iterdir()):
            self.client.upload_file(str(entry), self.bucket, self._key(self.stored_name(entry.name)))
        return f"s3://{self.bucket}/{self._key(self.export_id)}/"

    def close(self) -> None:
        """Delete what is left of the staging folder (a failed export's partial dataset) and
        release the lock."""
        shutil.rmtree(self.stage, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- local -----------------------------------------------------------------------------------

    def _commit_local(self) -> None:
        assert self.folder is not None
        if not self.folder.exists():
            os.rename(self.stage, self.folder)
            return
        self._carry(self.folder, self.stage, link=True)
        if _exchange(self.stage, self.folder):
            old = self.stage
        else:  # two renames; a crash between them is undone by the next export (_recover)
            old = self.folder.parent / f".{self.folder.name}.kafkagen-previous-{self.export_id}"
            os.rename(self.folder, old)
            os.rename(self.stage, self.folder)
        self._carry(old, self.folder, link=False)  # anything written into the old folder since
        shutil.rmtree(old, ignore_errors=True)

    def _foreign(self, entry: Path) -> bool:
        if entry.name.startswith(STAGE_PREFIX):
            return False  # a staging folder of earlier versions (inside the destination)
        if entry.is_dir():
            return True
        head = b""
        with contextlib.suppress(OSError), entry.open("rb") as f:
            head = f.read(4096)
        return not self._ours(entry.name, head)

    def _carry(self, source: Path, into: Path, *, link: bool) -> None:
        """Bring the entries of ``source`` that no export wrote into ``into`` (unless ``into`` has
        the name already): hard links (``link``), or moved."""
        for entry in sorted(source.iterdir()):
            to = into / entry.name
            if to.exists() or to.is_symlink() or not self._foreign(entry):
                continue
            if not link:
                os.rename(entry, to)
            elif entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, to, symlinks=True, copy_function=os.link)
            else:
                os.link(entry, to, follow_symlinks=False)

    def _recover(self) -> None:
        """Undo what a killed export left beside the folder (under the lock): a previous dataset
        renamed aside is put back when the folder is missing, or else deleted (after carrying its
        foreign files); staging folders are deleted."""
        assert self.folder is not None
        parent, name = self.folder.parent, self.folder.name
        previous = sorted(parent.glob(f".{name}.kafkagen-previous-export-*"))
        for aside in previous:
            if not self.folder.exists():
                os.rename(aside, self.folder)
                log.warning("put back %s: an export was killed while it replaced it", self.folder)
            else:
                self._carry(aside, self.folder, link=False)
                shutil.rmtree(aside, ignore_errors=True)
        for stage in parent.glob(f".{name}.kafkagen-export-*"):
            if stage.is_dir():
                if self.folder.exists():
                    self._carry(stage, self.folder, link=False)  # an exchange done, not cleaned up
                shutil.rmtree(stage, ignore_errors=True)

    # -- S3 --------------------------------------------------------------------------------------

    def _remove_stale_s3(self, *, keep_top: set[str]) -> None:
        """Delete the objects of earlier exports: other export folders older than this one, and
        top-level files of the flat layout that an export wrote (shards; a card we did not write
        now)."""
        assert self.bucket is not None and self.client is not None
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=base, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                folder = common["Prefix"][len(base) :].rstrip("/")
                # an older export's folder; a newer one belongs to an export still running
                if EXPORT_DIR.match(folder) and folder < self.export_id:
                    self._delete_under(common["Prefix"])
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base) :]
                if name in keep_top or name == MANIFEST_NAME:
                    continue
                if self._ours(name, self._head_s3(obj["Key"])):
                    self.client.delete_object(Bucket=self.bucket, Key=obj["Key"])
                    log.info("removed s3://%s/%s: a file of an earlier export", self.bucket, obj["Key"])

    def _head_s3(self, key: str) -> bytes:
        assert self.bucket is not None and self.client is not None
        from botocore.exceptions import ClientError  # here: a --help imports this module

        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range="bytes=0-4095")
        except ClientError as exc:  # gone meanwhile, or empty (no byte in the range)
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "InvalidRange"}:
                return b""
            raise
        data: bytes = resp["Body"].read()
        return data

    def _delete_under(self, prefix: str) -> None:
        assert self.bucket is not None and self.client is not None
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                self.client.delete_object(Bucket=self.bucket, Key=obj["Key"])
        log.info("removed s3://%s/%s: the shards of an earlier export", self.bucket, prefix)


def finish_shard(dest: Destination, name: str, *, fmt: str, kind: str, records: int) -> dict[str, Any]:
    """Publish the staged shard ``name`` and return its manifest entry: ``path``
    (:meth:`Destination.stored_name`), ``format``, ``kind``, ``records``, ``bytes`` and ``sha256``
    (of the file as stored, hex)."""
    path = dest.path(name)
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    entry = {
        "path": dest.stored_name(name),
        "format": fmt,
        "kind": kind,
        "records": records,
        "bytes": path.stat().st_size,
        "sha256": sha.hexdigest(),
    }
    dest.publish(name)
    return entry


@dataclass
class Shards:
    """Writes JSON Lines shards ``<stem>-NNNNN<suffix>`` of at most ``per_shard`` lines each,
    zstd-compressed (one frame per shard) unless ``compress`` is false.

    Args:
        dest: where they go.
        kind: ``completions`` or ``errors``: what the lines are (the manifest's ``kind``).
        per_shard: lines per shard.
        stem: the name before the shard number (default: ``kind``).
        suffix: the name after it (``.jsonl.zst``, or ``.jsonl`` uncompressed).
        fmt: the export format the shards belong to (the manifest's ``format``).
    """

    dest: Destination
    kind: str
    per_shard: int
    stem: str = ""
    suffix: str = ".jsonl.zst"
    fmt: str = "jsonl"
    compress: bool = True
    level: int = 3
    written: list[dict[str, Any]] = field(default_factory=list)
    _file: Any = None
    _writer: Any = None
    _name: str = ""
    _count: int = 0

    def add(self, value: bytes) -> None:
        """Write one line (JSON bytes, without the newline) to the current shard."""
        if self._file is None:
            self._name = f"{self.stem or self.kind}-{len(self.written):05d}{self.suffix}"
            self._file = self.dest.path(self._name).open("wb")
            self._writer = (
                zstandard.ZstdCompressor(level=self.level).stream_writer(self._file, closefd=False)
                if self.compress
                else self._file
            )
            self._count = 0
        self._writer.write(value + b"\n")
        self._count += 1
        if self._count >= self.per_shard:
            self.close()

    def close(self) -> None:
        """Finish the current shard, publish it and list it in :attr:`written`
        (:func:`finish_shard`)."""
        if self._file is None:
            return
        if self.compress:
            self._writer.flush(zstandard.FLUSH_FRAME)
            self._writer.close()
        self._file.close()
        self.written.append(
            finish_shard(self.dest, self._name, fmt=self.fmt, kind=self.kind, records=self._count)
        )
        self._writer = self._file = None
