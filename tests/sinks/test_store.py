"""The object store's error mapping (:mod:`sinks.store`), fed botocore errors built by hand:
milliseconds, no services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from sinks.batch import Batch
from sinks.layout import ObjectMeta
from sinks.lines import record_line
from sinks.store import ObjectStore, meta_from_body
from streams.errors import ConfigError, LayoutError, PermanentStorageError, StorageError
from streams.records import CompletionRecord
from streams.storage import permanent_error


def _client_error(code: str, status: int) -> ClientError:
    """The exception botocore raises for an S3 error response of this code and HTTP status."""
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        "PutObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "permanent"),
    [
        ("AccessDenied", 403, True),
        ("403", 403, True),  # HeadObject/HeadBucket: no body, the code is the status
        ("SignatureDoesNotMatch", 403, True),
        ("NoSuchBucket", 404, True),
        ("NoSuchKey", 404, False),  # a key deleted between calls: the put is retried
        ("SlowDown", 503, False),
        ("InternalError", 500, False),
        ("ConditionalRequestConflict", 409, False),
    ],
)
def test_s3_errors_are_classified_permanent_or_transient(code: str, status: int, permanent: bool) -> None:
    found = permanent_error(_client_error(code, status), "upload runs/k", "bucket-x")
    assert (found is not None) == permanent
    if found is not None:
        assert not found.retriable and "upload runs/k" in str(found) and "bucket-x" in str(found)
    assert permanent_error(StorageError("transient"), "list", "b") is None
    foreign = PermanentStorageError("s3://b/k exists but is not a sink object")
    assert permanent_error(foreign, "upload", "b") is foreign


class _FailingClient:
    """An S3 client whose every call raises ``error`` (and counts the calls)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: object, **kwargs: object) -> NoReturn:
            self.calls.append(name)
            raise self.error

        return call


def _store(error: Exception, threshold: int = 1 << 30) -> tuple[ObjectStore, _FailingClient]:
    client = _FailingClient(error)
    return ObjectStore(client, "bucket-x", threshold), client  # type: ignore[arg-type]


_META = ObjectMeta(0, 9, 10, "ab" * 32, 100)


def _every_call(store: ObjectStore) -> list[Callable[[], object]]:
    return [
        lambda: store.put_once("runs/k", b"body", _META),
        lambda: store.existing_meta("runs/k", 0),
        lambda: store.last_object("runs/folder/"),
        lambda: store.abort_uploads("runs/folder/"),
        lambda: store.check_bucket("http://s3"),
    ]


@pytest.mark.parametrize(
    "error",
    [
        _client_error("SlowDown", 503),
        _client_error("InternalError", 500),
        EndpointConnectionError(endpoint_url="http://s3"),
        ReadTimeoutError(endpoint_url="http://s3"),
    ],
)
def test_transient_botocore_errors_leave_the_store_as_retriable_storage_errors(error: Exception) -> None:
    store, _ = _store(error)
    for call in _every_call(store):
        with pytest.raises(StorageError) as raised:
            call()
        assert type(raised.value) is StorageError and raised.value.retriable
        assert str(error) in str(raised.value)


def test_permanent_botocore_errors_leave_the_store_as_permanent_storage_errors() -> None:
    store, _ = _store(_client_error("NoSuchBucket", 404))
    for call in _every_call(store)[:4]:
        with pytest.raises(PermanentStorageError) as raised:
            call()
        assert not raised.value.retriable and "create bucket 'bucket-x'" in str(raised.value)
    with pytest.raises(PermanentStorageError, match="upload runs/k failed permanently"):
        store.put_once("runs/k", b"body", _META)
    store, _ = _store(_client_error("InvalidBucketName", 400))
    with pytest.raises(PermanentStorageError, match="HeadBucket bucket-x"):
        store.check_bucket("http://s3")


@pytest.mark.parametrize(("status", "says"), [(403, "access denied"), (404, "no such bucket")])
def test_a_missing_or_refused_bucket_is_a_config_error(status: int, says: str) -> None:
    store, _ = _store(_client_error(str(status), status))
    with pytest.raises(ConfigError, match=f"S3 bucket 'bucket-x' at http://s3: {says}"):
        store.check_bucket("http://s3")


def test_a_failed_multipart_upload_is_aborted_and_mapped() -> None:
    store, client = _store(_client_error("SlowDown", 503), threshold=1)
    with pytest.raises(StorageError):
        store.put_once("runs/k", b"body", _META)
    assert client.calls == ["create_multipart_upload"]


def test_meta_is_rebuilt_from_a_body_and_a_foreign_body_is_refused() -> None:
    batch = Batch(3)
    for offset in (5, 6, 7):
        line, _ = record_line(
            topic="t",
            partition=0,
            offset=offset,
            timestamp_ms=1,
            key=None,
            value=None,
            record_type=CompletionRecord,
            run_id="r",
        )
        batch.add(offset, line)
    body, meta = batch.seal()
    assert meta_from_body(body) == meta
    foreign = Batch(3)
    foreign.add(0, b'{"notes": "somebody else\'s"}\n')
    with pytest.raises(LayoutError):
        meta_from_body(foreign.seal()[0])
    with pytest.raises(LayoutError, match="empty"):
        meta_from_body(Batch(3).seal()[0])
