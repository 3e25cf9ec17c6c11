"""The one place that builds boto3 S3 clients from :class:`streams.config.S3Settings`.

Path-style addressing (SeaweedFS and MinIO need it; AWS accepts it), explicit keys, and
``AWS_EC2_METADATA_DISABLED=true`` so botocore never probes the cloud metadata address
(docs/local-stack.md). Retries use botocore's "standard" mode (exponential backoff
with jitter on throttling, 5xx and connection errors; botocore docs, "Retries").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from streams.config import S3Settings, aws_environment

__all__ = ["s3_client"]

if TYPE_CHECKING:
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
