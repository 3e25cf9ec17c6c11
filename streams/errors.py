"""The one error hierarchy of kafkagen.

Every error the project raises on purpose derives from :class:`KafkagenError`.
Like aiokafka's ``KafkaError.retriable``, each class says on the class itself
whether doing the same thing again may succeed (``retriable = True``) or is
pointless until something changes (``retriable = False``). Retry policies
read that attribute instead of matching on types.

Messages are written for the person at the terminal: what went wrong, where
(file, line, record id, address) and what to do about it.
"""

from __future__ import annotations


class KafkagenError(Exception):
    """Base of all kafkagen errors.

    Attributes:
        retriable: ``True`` when the same operation may succeed if tried again
            later without any change (a transient network or server fault).
    """

    retriable: bool = False


class ConfigError(KafkagenError):
    """A setting is missing, malformed or inconsistent. Fix the setting; never retriable."""


class ForeignRunError(ConfigError):
    """A topic or record belongs to another run than the one this process works for
    (``docs/runs.md``). Never retriable: the message names the topic, its owner and the flag that
    fixes it."""


class StackError(KafkagenError):
    """The local stack (Kafka, S3, LLM servers) could not be installed, started or stopped.

    The message names the service and what to do, e.g. "Java 17+ not found" or
    "port 9092 is taken by pid 1234".
    """


class ServiceNotReadyError(StackError):
    """A service did not become ready within its readiness timeout (seconds). Retriable."""

    retriable = True


class InputError(KafkagenError):
    """A bad input record or file: names the file, the line number and the reason. Never retriable."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")
        self.source = source
        self.line = line
        self.reason = message


class ServerError(KafkagenError):
    """An inference server answered with an error or not at all.

    Attributes:
        status: the HTTP status code, or ``None`` for a connection error or timeout.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetriableServerError(ServerError):
    """503/429/5xx, connection refused or reset, timeout, ``finish_reason == "abort"``.

    Retried with backoff a bounded number of times, then dead-lettered
    (classification from ``docs/sglang.md``: SGLang's 503 queue-full,
    timeouts and graceful aborts).
    """

    retriable = True


class FatalRequestError(ServerError):
    """400/404/422: the request itself is wrong (prompt too long, invalid parameters,
    duplicate in-flight ``rid``). Sending it again as-is cannot succeed: dead-letter it."""


class StorageError(KafkagenError):
    """An S3 operation failed. Retriable: the sink blocks the partition and retries with backoff."""

    retriable = True


class PermanentStorageError(StorageError):
    """An S3 operation that cannot succeed until someone acts: access denied, no such bucket, bad
    credentials, or a key the sink must write already holding an object that is not the sink's.
    Never retriable: the message names the bucket or key and what to do."""

    retriable = False
