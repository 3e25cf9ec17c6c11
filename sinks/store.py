"""The sink's object store: its S3 operations, and the one place botocore errors become kafkagen's.

Every object is created with ``If-None-Match: *`` (rule 2 of docs/sink.md), so an existing object is
never overwritten: a 412 answers with its metadata instead (:class:`PutOutcome`). The store also lists
a partition's folder for its last object, aborts dangling multipart uploads and checks the bucket.
Every public method raises :class:`~streams.errors.StorageError` (retriable) or
:class:`~streams.errors.PermanentStorageError` (which errors are which: docs/sink.md, "S3 errors and
retries"), never a botocore exception. The calls block (boto3): run them in worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from sinks.layout import ObjectMeta, decode_line, iter_body_lines, parse_key
from sinks.pause import TestPause
from streams.errors import ConfigError, LayoutError, PermanentStorageError
from streams.storage import http_status, storage_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

__all__ = [
    "MIN_PART_BYTES",
    "ObjectStore",
    "PutOutcome",
    "meta_from_body",
]

log = logging.getLogger("kafkagen.sink")

MIN_PART_BYTES: Final = 5 * 1024 * 1024
"""S3's smallest multipart part, bytes (all parts but the last)."""


@dataclass(frozen=True)
class PutOutcome:
    """What a conditional create did: ``created``, or found the key taken by ``meta``'s object."""

    created: bool
    meta: ObjectMeta


class ObjectStore:
    """The sink's S3 operations: blocking boto3 calls, meant to run in worker threads.

    Args:
        client: from :func:`streams.storage.s3_client`.
        bucket: the bucket.
        multipart_threshold: bodies of at least this many bytes go as multipart uploads.
        pause: the test hook (:mod:`sinks.pause`).
    """

    def __init__(
        self, client: S3Client, bucket: str, multipart_threshold: int, pause: TestPause | None = None
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.multipart_threshold = multipart_threshold
        self.part_bytes = max(MIN_PART_BYTES, multipart_threshold)
        self.pause = pause or TestPause(None)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn what S3 raises inside into :func:`storage_error`'s error for ``what``."""
        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise storage_error(exc, what, self.bucket) from None

    def check_bucket(self, endpoint_url: str | None) -> None:
        """Check the bucket exists and the keys may use it (``HeadBucket``).

        Args:
            endpoint_url: the S3 endpoint, for the message.

        Raises:
            ConfigError: the bucket does not exist (404) or access is denied (403).
            StorageError, PermanentStorageError: S3 failed otherwise.
        """
        what = f"HeadBucket {self.bucket}"
        with self._errors(what):
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if http_status(exc) in (403, 404):
                    raise ConfigError(
                        f"S3 bucket {self.bucket!r} at {endpoint_url}: "
                        f"{'access denied' if http_status(exc) == 403 else 'no such bucket'} "
                        "(check KAFKAGEN_S3__BUCKET and the keys)"
                    ) from None
                raise

    def put_once(self, key: str, body: bytes, meta: ObjectMeta) -> PutOutcome:
        """Create ``key`` unless it exists (``If-None-Match: *``); never overwrite.

        Args:
            body: the compressed object (bytes); multipart at or above the threshold.
            meta: its metadata (:meth:`sinks.batch.Batch.seal`).

        Returns:
            ``created=True`` with ``meta``, or ``created=False`` with the existing object's metadata.

        Raises:
            StorageError: S3 failed (retriable: the caller retries).
            PermanentStorageError: the key holds an object that is not this partition's sink
                object starting at ``meta.start_offset`` (it is left alone), or S3 refuses for good.
        """
        with self._errors(f"upload {key}"):
            try:
                if len(body) >= self.multipart_threshold:
                    self._put_multipart(key, body, meta)
                else:
                    self.pause("during_upload", f"key={key} single put")
                    self.client.put_object(
                        Bucket=self.bucket, Key=key, Body=body, Metadata=meta.to_s3(), IfNoneMatch="*"
                    )
                return PutOutcome(True, meta)
            except ClientError as exc:
                if http_status(exc) != 412:
                    raise
            return PutOutcome(False, self._existing_meta(key, meta.start_offset))

    def _put_multipart(self, key: str, body: bytes, meta: ObjectMeta) -> None:
        upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key, Metadata=meta.to_s3())[
            "UploadId"
        ]
        try:
            parts: list[CompletedPartTypeDef] = []
            for number, start in enumerate(range(0, len(body), self.part_bytes), start=1):
                resp = self.client.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body[start : start + self.part_bytes],
                )
                parts.append({"PartNumber": number, "ETag": resp["ETag"]})
                self.pause("during_upload", f"key={key} part={number} multipart")
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def existing_meta(self, key: str, start_offset: int) -> ObjectMeta:
        """Metadata of the existing object at ``key``; rebuilt from its body if its metadata is gone.

        Raises:
            PermanentStorageError: it is not a sink object starting at ``start_offset``.
            StorageError: S3 failed.
        """
        with self._errors(f"read {key}"):
            return self._existing_meta(key, start_offset)

    def _existing_meta(self, key: str, start_offset: int) -> ObjectMeta:
        head = self.client.head_object(Bucket=self.bucket, Key=key)
        try:
            meta = ObjectMeta.from_s3(head.get("Metadata", {}))
        except LayoutError:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            try:
                meta = meta_from_body(body)
            except LayoutError as exc:
                raise PermanentStorageError(
                    f"s3://{self.bucket}/{key} exists but is not a sink object ({exc}); the sink will not "
                    "overwrite it: move it out of the run folder, then start the sink again"
                ) from None
        if meta.start_offset != start_offset:
            raise PermanentStorageError(
                f"s3://{self.bucket}/{key} claims offsets {meta.start_offset}..{meta.end_offset}, "
                f"but its key says {start_offset}; the sink will not overwrite it: move it out of the "
                "run folder, then start the sink again"
            )
        return meta

    def last_object(self, folder: str) -> tuple[str, ObjectMeta] | None:
        """The object with the highest start offset under ``folder`` and its metadata, or ``None``.

        Keys that do not follow the layout are ignored (logged).

        Raises:
            StorageError, PermanentStorageError: as :meth:`existing_meta`.
        """
        with self._errors(f"list {folder}"):
            best: tuple[int, str] | None = None
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=folder):
                for obj in page.get("Contents", []):
                    try:
                        start = parse_key(obj["Key"]).start_offset
                    except LayoutError as exc:
                        log.warning("ignoring %s: %s", obj["Key"], exc)
                        continue
                    if best is None or start > best[0]:
                        best = (start, obj["Key"])
            if best is None:
                return None
            return best[1], self._existing_meta(best[1], best[0])

    def abort_uploads(self, folder: str) -> int:
        """Abort the multipart uploads under ``folder`` (left by killed writers); returns how many.

        Raises:
            StorageError, PermanentStorageError: S3 failed.
        """
        with self._errors(f"abort uploads under {folder}"):
            resp = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=folder)
            uploads = resp.get("Uploads", [])
            for upload in uploads:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
            return len(uploads)


def meta_from_body(body: bytes) -> ObjectMeta:
    """Rebuild an object's metadata from its compressed body (offsets, count, checksum).

    Raises:
        LayoutError: the body is not sink lines.
    """
    sha = hashlib.sha256()
    offsets: list[int] = []
    size = 0
    for raw in iter_body_lines(body):
        offsets.append(decode_line(raw).offset)
        sha.update(raw)
        size += len(raw)
    if not offsets:
        raise LayoutError("empty object")
    return ObjectMeta(min(offsets), max(offsets), len(offsets), sha.hexdigest(), size)
