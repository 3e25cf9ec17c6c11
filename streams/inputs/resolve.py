"""Resolving command-line inputs: files, globs, folders, ``-`` for stdin,
``s3://`` objects and S3 globs become an ordered list of :class:`InputSpec` (opening one is
:mod:`streams.inputs.opening`).

A folder stands for every prompt file under it (:func:`streams.inputs.sniff.is_prompt_file`), at
any depth, in path order, hidden files and folders left out; any other file is refused unless
``skip_unreadable`` is set (the rules: ``docs/inputs.md``, "Files").
"""

from __future__ import annotations

import fnmatch
import glob
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from streams.errors import InputError
from streams.inputs.sniff import PROMPT_SUFFIXES, is_prompt_file

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["GLOB_CHARS", "InputSpec", "resolve_inputs", "split_s3"]

GLOB_CHARS: Final = frozenset("*?[")
"""Characters that make a local path or an S3 key a glob."""


@dataclass(frozen=True)
class InputSpec:
    """One input (of the producer, or of the export's ``--input``), resolved from a command line.

    Attributes:
        name: as given (a glob's match: its path as globbed); ``metadata.source`` and derived ids
            use it.
        kind: ``file``, ``s3`` or ``stdin``.
        location: the absolute resolved path, the ``s3://bucket/key`` URI, or ``-``.
        size: bytes on disk or in S3 (compressed size for compressed inputs); ``None`` for stdin.
    """

    name: str
    kind: Literal["file", "s3", "stdin"]
    location: str
    size: int | None


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` → ``(bucket, key)``.

    Raises:
        InputError: the bucket or the key is empty.
    """
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key:
        raise InputError("an S3 input must be s3://BUCKET/KEY", source=uri)
    return bucket, key


def resolve_inputs(
    items: Sequence[str], s3: Callable[[], S3Client], *, skip_unreadable: bool = False
) -> list[InputSpec]:
    """Expand the command line's inputs (files, globs, folders, ``-``, ``s3://`` URIs and globs)
    in order.

    An input reached twice (a file named and globbed) is kept once, at its first place.

    Args:
        s3: returns the S3 client; called only when an ``s3://`` input is given.
        skip_unreadable: a folder's files that are not prompt files are left out instead of
            refused (``docs/inputs.md``, "Files").

    Raises:
        InputError: a file or S3 object that does not exist, a folder holding a file that is not
            a prompt file (unless ``skip_unreadable``) or no prompt file at all, a glob matching
            nothing, ``-`` given twice.
        StorageError: S3 could not be asked.
    """
    specs: list[InputSpec] = []
    seen: set[str] = set()

    def add(spec: InputSpec) -> None:
        if spec.location not in seen:
            seen.add(spec.location)
            specs.append(spec)

    for item in items:
        if item == "-":
            if "-" in seen:
                raise InputError("stdin ('-') can be read only once")
            add(InputSpec("-", "stdin", "-", None))
        elif item.startswith("s3://"):
            for spec in _resolve_s3(item, s3):
                add(spec)
        else:
            path = Path(item)
            if path.is_dir():
                for file in _folder_files(path, item, skip_unreadable=skip_unreadable):
                    add(InputSpec(str(file), "file", str(file.resolve()), file.stat().st_size))
                continue
            if path.exists():
                add(InputSpec(item, "file", str(path.resolve()), path.stat().st_size))
                continue
            if not GLOB_CHARS & set(item):
                raise InputError("no such file", source=item)
            matches = sorted(m for m in glob.glob(item, recursive=True) if Path(m).is_file())
            if not matches:
                raise InputError("no file matches this pattern", source=item)
            for match in matches:
                add(InputSpec(match, "file", str(Path(match).resolve()), Path(match).stat().st_size))
    return specs


def _folder_files(folder: Path, item: str, *, skip_unreadable: bool) -> list[Path]:
    """The prompt files under ``folder`` in path order (``docs/inputs.md``, "Files").

    Raises:
        InputError: a file that is not a prompt file (unless ``skip_unreadable``) or cannot be
            opened, or no prompt file at all.
    """
    files = sorted(
        p
        for p in folder.rglob("*")
        if not any(part.startswith(".") for part in p.relative_to(folder).parts) and p.is_file()
    )
    found: list[Path] = []
    other: list[str] = []
    for file in files:
        try:
            readable = is_prompt_file(file)
        except OSError as exc:
            raise InputError(f"cannot be read: {exc.strerror or exc}", source=str(file)) from None
        if readable:
            found.append(file)
        else:
            other.append(str(file.relative_to(folder)))
    if other and not skip_unreadable:
        shown = ", ".join(other[:10]) + (f" and {len(other) - 10} more" if len(other) > 10 else "")
        raise InputError(
            f"is a folder holding {len(other)} file(s) that are not prompt files ({shown}): move them "
            "out, give the files to read (e.g. with a glob), or pass --skip-unreadable to leave them out",
            source=item,
        )
    if not found:
        raise InputError(
            f"is a folder without prompt files ({', '.join(PROMPT_SUFFIXES)}, plain or compressed)",
            source=item,
        )
    return found


def _resolve_s3(uri: str, s3: Callable[[], S3Client]) -> list[InputSpec]:
    from botocore.exceptions import BotoCoreError, ClientError

    from streams.storage import storage_error  # boto3 is imported only for S3 inputs

    bucket, key = split_s3(uri)
    try:
        client = s3()
        glob_at = min((key.index(c) for c in GLOB_CHARS if c in key), default=-1)
        if glob_at < 0:
            head = client.head_object(Bucket=bucket, Key=key)
            return [InputSpec(uri, "s3", uri, head["ContentLength"])]
        found: list[InputSpec] = []
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key[:glob_at])
        for page in pages:
            for obj in page.get("Contents", []):
                if fnmatch.fnmatchcase(obj["Key"], key):
                    name = f"s3://{bucket}/{obj['Key']}"
                    found.append(InputSpec(name, "s3", name, obj["Size"]))
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
            raise InputError("no such S3 object (or bucket)", source=uri) from None
        raise storage_error(exc, f"listing {uri}", bucket, name_it=True) from None
    except BotoCoreError as exc:
        raise storage_error(exc, f"listing {uri}", bucket, name_it=True) from None
    if not found:
        raise InputError("no S3 object matches this pattern", source=uri)
    return sorted(found, key=lambda s: s.name)
