"""The one place that builds boto3 S3 clients from :class:`streams.config.S3Settings`.

Path-style addressing (SeaweedFS and MinIO need it; AWS accepts it), explicit keys, and
``AWS_EC2_METADATA_DISABLED=true`` so botocore never probes the cloud metadata address
(docs/local-stack.md). Retries use botocore's "standard" mode (exponential backoff
with jitter on throttling, 5xx and connection errors; botocore docs, "Retries").

It also owns what a botocore error means for kafkagen (:func:`storage_error`,
:func:`permanent_error`; ``docs/s3.md``, "Errors and retries"): every S3 edge (the sink's object
store, the export, S3 inputs) wraps botocore errors with them, so nothing above sees one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from streams.config import S3Settings
from streams.environment import aws_environment
from streams.errors import KafkagenError, PermanentStorageError, StorageError

__all__ = ["PERMANENT_S3_CODES", "http_status", "permanent_error", "s3_client", "storage_error"]

if TYPE_CHECKING:
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client


def s3_client(
    settings: S3Settings,
    *,
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 60.0,
    max_attempts: int = 5,
) -> S3Client:
    """A boto3 S3 client for ``settings``.

    Args:
        connect_timeout_s / read_timeout_s: socket timeouts in seconds.
        max_attempts: botocore's total attempts per call (first try included).
    """
    import boto3  # here, not at import: a --help loads this module and boto3 costs ~0.5 s
    from botocore.config import Config

    os.environ.update(aws_environment())
    config = Config(
        s3={"addressing_style": "path"},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"mode": "standard", "max_attempts": max_attempts},
        signature_version="s3v4",
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=settings.secret_access_key.get_secret_value(),
        config=config,
    )


PERMANENT_S3_CODES: Final = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccountProblem",
        "NoSuchBucket",
        "InvalidBucketName",
        "InvalidArgument",
        "EntityTooLarge",
    }
)
"""S3 error codes (AWS S3 API reference, "Error responses") that mean the request cannot succeed
as it is: retrying them only repeats the failure."""


def http_status(exc: ClientError) -> int:
    """The HTTP status of an S3 error response (0 when botocore has none)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def permanent_error(exc: BaseException, what: str, bucket: str) -> PermanentStorageError | None:
    """``exc`` as a :class:`PermanentStorageError` naming the operation and what to do, or ``None``
    when it is transient (network errors, 5xx, throttling, 404 on a key, 409/412 races).

    Permanent: an error already marked non-retriable, an S3 error code in
    :data:`PERMANENT_S3_CODES`, or any 403.

    Args:
        what: the operation, for the message (``upload <key>``).
        bucket: the bucket, for the advice.
    """
    from botocore.exceptions import ClientError

    if isinstance(exc, KafkagenError) and not exc.retriable:
        return exc if isinstance(exc, PermanentStorageError) else PermanentStorageError(str(exc))
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code not in PERMANENT_S3_CODES and http_status(exc) != 403:
        return None
    advice = {
        "NoSuchBucket": f"create bucket {bucket!r} or set KAFKAGEN_S3__BUCKET",
        "InvalidBucketName": "fix KAFKAGEN_S3__BUCKET",
        "EntityTooLarge": "lower sink.flush_bytes",
        "InvalidArgument": "check the S3 settings and the server's limits",
    }.get(code, f"check the S3 keys and their permissions on bucket {bucket!r}")
    reason = code or http_status(exc)
    return PermanentStorageError(f"S3 {what} failed permanently ({reason}: {exc}): {advice}")


def storage_error(exc: BaseException, what: str, bucket: str, *, name_it: bool = False) -> StorageError:
    """``exc`` (a botocore error, or a kafkagen one) as the error the store raises: the
    :class:`PermanentStorageError` of :func:`permanent_error` when it is permanent, else a retriable
    :class:`StorageError` with the same message, or ``S3 <what> failed: <message>`` with ``name_it``
    (for a caller whose log line does not name the operation itself); a :class:`StorageError` is
    returned as it is."""
    permanent = permanent_error(exc, what, bucket)
    if permanent is not None:
        return permanent
    if isinstance(exc, StorageError):
        return exc
    return StorageError(f"S3 {what} failed: {exc}" if name_it else str(exc))
