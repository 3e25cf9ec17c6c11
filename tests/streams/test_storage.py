"""S3 through the project's client factory, against the real local SeaweedFS."""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from streams.config import Settings
from streams.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef


@pytest.fixture
def client(s3: str, settings: Settings) -> S3Client:
    return s3_client(settings.s3)


def test_put_get_list_delete(client: S3Client, settings: Settings) -> None:
    bucket, prefix = settings.s3.bucket, settings.s3.prefix
    for i in range(3):
        client.put_object(Bucket=bucket, Key=f"{prefix}/obj-{i}", Body=f"body-{i}".encode())
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"{prefix}/obj-{i}" for i in range(3)]
    assert client.get_object(Bucket=bucket, Key=f"{prefix}/obj-1")["Body"].read() == b"body-1"
    client.delete_object(Bucket=bucket, Key=f"{prefix}/obj-1")
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"{prefix}/obj-0", f"{prefix}/obj-2"]


def test_multipart_upload_of_20_mb(client: S3Client, settings: Settings) -> None:
    bucket, key = settings.s3.bucket, f"{settings.s3.prefix}/big.bin"
    data = os.urandom(20 * 1024 * 1024)
    part_size = 8 * 1024 * 1024
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    parts: list[CompletedPartTypeDef] = []
    for n, start in enumerate(range(0, len(data), part_size), start=1):
        resp = client.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=n,
            Body=data[start : start + part_size],
        )
        parts.append({"PartNumber": n, "ETag": resp["ETag"]})
    assert len(parts) == 3
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    got = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()


def test_conditional_create_refuses_an_existing_key(client: S3Client, settings: Settings) -> None:
    """``If-None-Match: *`` is what the sink's exactly-once files rest on: SeaweedFS honours it
    on PutObject (412 PreconditionFailed when the key exists) and leaves the object unchanged."""
    bucket, key = settings.s3.bucket, f"{settings.s3.prefix}/once"
    client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_conditional_complete_multipart_refuses_an_existing_key(client: S3Client, settings: Settings) -> None:
    bucket, key = settings.s3.bucket, f"{settings.s3.prefix}/once-multipart"
    client.put_object(Bucket=bucket, Key=key, Body=b"first")
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    part = client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"second"
    )
    with pytest.raises(ClientError) as info:
        client.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
            IfNoneMatch="*",
        )
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"
