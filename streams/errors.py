"""The one error hierarchy of kafkagen.

Every error the project raises on purpose derives from :class:`KafkagenError`::

    KafkagenError                      retriable  exit status (``exit_status``)
    ├── ConfigError                    no         2  a setting is missing, malformed, inconsistent
    │   ├── ForeignRunError            no         2  a topic or record of another run
    │   └── PreflightError             no         2  the preflight's answers trip the gate
    ├── InputError                     no         2  a bad input file, line or record
    │   ├── RecordDecodeError          no         2  bytes that are not a valid record
    │   ├── InputChangedError          no         2  an input changed since the run published it
    │   └── LayoutError                no         2  an S3 key or line not in kafkagen's layout
    ├── RunNotFoundError               no         1  no topic of the run on the Kafka asked
    ├── RegenerationFenced             no         1  another regenerate of the run took over
    ├── UnavailableError               yes        3  Kafka (or another service) cannot be reached
    ├── DeadlineError                  no         1  a job did not finish in the time it was given
    ├── StackError                     no         3  the local stack cannot start or stop
    │   └── ServiceNotReadyError       yes        3  a service did not become ready in time
    ├── ServerError                    no         1  an inference server answered with an error
    │   ├── RetriableServerError       yes        3  503/429/5xx, timeouts, aborts; never came up
    │   └── FatalRequestError          no         1  400/404/422: the request itself is wrong
    └── StorageError                   yes        3  an S3 call failed (botocore errors wrapped)
        └── PermanentStorageError      no         1  access denied, no bucket, a foreign object

Errors of the libraries below are wrapped where they enter: botocore's at the object store
(``sinks/store.py``), aiokafka's keep their own class, whose ``retriable`` attribute has the same
meaning (``aiokafka/errors.py``, aiokafka 0.14). Validators inside pydantic models raise
``ValueError``, as pydantic requires; :func:`streams.config.load_settings` turns them into one
:class:`ConfigError`.
Like aiokafka's ``KafkaError.retriable``, each class says on the class itself
whether doing the same thing again may succeed (``retriable = True``) or is
pointless until something changes (``retriable = False``), and the exit status a
command ends with (``exit_status``, an :class:`ExitCode`; :func:`streams.cli.exit_code`
reads it). Retry policies read those attributes instead of matching on types.

Messages are written for the person at the terminal: what went wrong, where
(file, line, record id, address) and what to do about it.
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "DeadlineError",
    "ExitCode",
    "FatalRequestError",
    "ForeignRunError",
    "InputChangedError",
    "InputError",
    "KafkagenError",
    "LayoutError",
    "PermanentStorageError",
    "PreflightError",
    "RecordDecodeError",
    "RegenerationFenced",
    "RetriableServerError",
    "RunNotFoundError",
    "ServerError",
    "ServiceNotReadyError",
    "StackError",
    "StorageError",
    "UnavailableError",
]


class ExitCode(enum.IntEnum):
    """The exit status of every kafkagen command (the table in :mod:`streams.cli`)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    UNAVAILABLE = 3
    INTERRUPTED = 130


class KafkagenError(Exception):
    """Base of all kafkagen errors.

    Attributes:
        retriable: ``True`` when the same operation may succeed if tried again
            later without any change (a transient network or server fault).
        exit_status: the status a command that ends with this error exits with.
    """

    retriable: bool = False
    exit_status: ExitCode = ExitCode.FAILED


class ConfigError(KafkagenError):
    """A setting is missing, malformed or inconsistent. Fix the setting; never retriable."""

    exit_status = ExitCode.USAGE


class ForeignRunError(ConfigError):
    """A topic or record belongs to another run than the one this process works for
    (``docs/runs.md``). Never retriable: the message names the topic, its owner and the flag that
    fixes it."""


class UnavailableError(KafkagenError):
    """A service kafkagen needs (Kafka, S3, an inference server at start) cannot be reached; the
    message names its address. Retriable: it may be back later."""

    exit_status = ExitCode.UNAVAILABLE

    retriable = True


class DeadlineError(KafkagenError):
    """A job did not finish within the time it was given (seconds; e.g. ``kafkagen run
    --timeout``). The message says how far it got; running it again resumes."""


class StackError(KafkagenError):
    """The local stack (Kafka, S3, LLM servers) could not be installed, started or stopped.

    The message names the service and what to do, e.g. "Java 17+ not found" or
    "port 9092 is taken by pid 1234".
    """

    exit_status = ExitCode.UNAVAILABLE


class ServiceNotReadyError(StackError):
    """A service did not become ready within its readiness timeout (seconds). Retriable."""

    retriable = True


class InputError(KafkagenError):
    """A bad input record or file: names the file, the line number and the reason. Never retriable."""

    exit_status = ExitCode.USAGE

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")
        self.source = source
        self.line = line
        self.reason = message


class RecordDecodeError(InputError):
    """Bytes that are not a valid record of the expected type. The message says which field is
    wrong (msgspec's field path, e.g. ``$.messages[0]``)."""


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

    exit_status = ExitCode.UNAVAILABLE

    retriable = True


class FatalRequestError(ServerError):
    """400/404/422: the request itself is wrong (prompt too long, invalid parameters,
    duplicate in-flight ``rid``). Sending it again as-is cannot succeed: dead-letter it."""


class StorageError(KafkagenError):
    """An S3 operation failed. Retriable: the sink blocks the partition and retries with backoff."""

    exit_status = ExitCode.UNAVAILABLE

    retriable = True


class PermanentStorageError(StorageError):
    """An S3 operation that cannot succeed until someone acts: access denied, no such bucket, bad
    credentials, or a key the sink must write already holding an object that is not the sink's.
    Never retriable: the message names the bucket or key and what to do."""

    exit_status = ExitCode.FAILED

    retriable = False


class LayoutError(InputError):
    """An S3 key or body line that is not in kafkagen's layout (``sinks/layout.py``): another
    tool's object under the sink's prefix, or a damaged one. Never retriable: the message names
    the key or line."""


class InputChangedError(InputError):
    """An input differs from what an earlier run of the same run id published from it."""


class PreflightError(ConfigError):
    """The servers answer, but the sample's answers at the run's settings trip the quality gate.
    The message names each failing server, the classes and their shares, the fix and the
    recommended ``--max-tokens``. Exit status 2: the settings (or the servers' flags) must change."""


class RegenerationFenced(KafkagenError):
    """Another ``kafkagen regenerate`` of the same run started while this one ran: this one's
    transaction was aborted, nothing of it was published (exit 1)."""


class RunNotFoundError(KafkagenError):
    """The run has neither a prompts nor a completions topic on the Kafka asked (exit 1)."""
