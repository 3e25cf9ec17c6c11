"""The export's destination: a local folder or ``s3://bucket/prefix``, and the JSON Lines shards
written to it.

Shards are written to a staging folder (inside a local destination, so a move is a rename; a
temporary folder for ``s3://``), moved or uploaded into place (:meth:`Destination.publish`), then
``manifest.json``; finally the files of the destination named like this export's shards (any
format's, :data:`sinks.export.formats.SHARD_NAME`) that the new manifest does not list are
deleted, so re-exporting into the same folder leaves no stale shard of an earlier export.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import zstandard
from botocore.exceptions import ClientError

from streams.errors import ConfigError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["STAGE_PREFIX", "Destination", "Shards", "finish_shard"]

STAGE_PREFIX: Final = ".kafkagen-export-"


class Destination:
    """A local folder, or ``s3://bucket/prefix``. Files are written to a staging folder (inside
    a local destination, so a move is a rename) and put in place by :meth:`publish`."""

    def __init__(self, target: str, client: S3Client | None) -> None:
        self.target = target
        if target.startswith("s3://"):
            bucket, _, prefix = target.removeprefix("s3://").partition("/")
            if not bucket:
                raise ConfigError(f"--to {target!r}: expected s3://bucket/prefix")
            self.bucket: str | None = bucket
            self.prefix = prefix.strip("/")
            self.folder: Path | None = None
            self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX))
            self.client = client
        else:
            self.bucket = None
            self.prefix = ""
            self.folder = Path(target)
            self.folder.mkdir(parents=True, exist_ok=True)
            self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=self.folder))
            self.client = None

    def path(self, name: str) -> Path:
        """Where to write ``name`` before :meth:`publish`."""
        return self.stage / name

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def where(self, name: str) -> str:
        """Where ``name`` is once published (a path, or an ``s3://`` URI)."""
        if self.folder is not None:
            return str(self.folder / name)
        return f"s3://{self.bucket}/{self._key(name)}"

    def publish(self, name: str) -> None:
        """Put a staged file in place (a rename, or an upload for S3)."""
        if self.folder is not None:
            os.replace(self.stage / name, self.folder / name)
            return
        assert self.bucket is not None and self.client is not None
        self.client.upload_file(str(self.stage / name), self.bucket, self._key(name))
        (self.stage / name).unlink()

    def names(self, pattern: re.Pattern[str]) -> set[str]:
        """Names of the files in place (directly in the folder or prefix) that match ``pattern``."""
        if self.folder is not None:
            return {p.name for p in self.folder.iterdir() if p.is_file() and pattern.match(p.name)}
        assert self.bucket is not None and self.client is not None
        found: set[str] = set()
        base = f"{self.prefix}/" if self.prefix else ""
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base, Delimiter="/"
        ):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base) :]
                if pattern.match(name):
                    found.add(name)
        return found

    def head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes of a file in place (``b""`` when there is none).

        Raises:
            botocore.exceptions.ClientError, BotoCoreError: S3 failed (other than a missing key).
        """
        if self.folder is not None:
            try:
                with (self.folder / name).open("rb") as f:
                    return f.read(size)
            except FileNotFoundError:
                return b""
        assert self.bucket is not None and self.client is not None
        try:
            resp = self.client.get_object(
                Bucket=self.bucket, Key=self._key(name), Range=f"bytes=0-{size - 1}"
            )
        except ClientError as exc:  # none there, or an empty object (no byte in the range)
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "InvalidRange"}:
                return b""
            raise
        data: bytes = resp["Body"].read()
        return data[:size]

    def remove(self, name: str) -> None:
        """Delete a file in place (a stale shard)."""
        if self.folder is not None:
            (self.folder / name).unlink(missing_ok=True)
        else:
            assert self.bucket is not None and self.client is not None
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def close(self) -> None:
        """Remove the staging folder and what is left in it."""
        shutil.rmtree(self.stage, ignore_errors=True)


def finish_shard(dest: Destination, name: str, *, fmt: str, kind: str, records: int) -> dict[str, Any]:
    """Publish the staged shard ``name`` and return its manifest entry: ``path``, ``format``,
    ``kind``, ``records``, ``bytes`` and ``sha256`` (of the file as stored, hex)."""
    path = dest.path(name)
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    entry = {
        "path": name,
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
