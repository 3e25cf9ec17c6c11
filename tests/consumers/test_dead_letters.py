"""The consumer's dead letters (consumers.dead_letters) and completion records (consumers.emit):
pure builders, no Kafka."""

from __future__ import annotations

from aiokafka import ConsumerRecord
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, NotLeaderForPartitionError

from consumers.dead_letters import FOREIGN_RUN_PROMPT, DeadLetters
from consumers.emit import completion_record
from consumers.positions.jobs import Job
from consumers.servers.answers import ChatResult
from consumers.servers.requests import chat_request_body
from streams.config import GenerationSettings
from streams.errors import FatalRequestError, RetriableServerError
from streams.records import PromptRecord, SourceOffset, Usage
from streams.retry import kafka_outage
from tests.helpers import make_prompt

LETTERS = DeadLetters("run", "http://s")


def record(key: bytes | None, value: bytes | None = b"{}", offset: int = 7) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="run.prompts",
        partition=2,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=key,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=0,
        headers=(),
    )


def test_an_undecodable_record_keeps_its_bytes_and_is_named_by_its_key_or_position() -> None:
    error = LETTERS.undecodable(record(b"p-1", b"not json"), ValueError("bad"))
    assert (error.id, error.raw, error.error_type, error.message) == (
        "p-1",
        "not json",
        "RecordDecodeError",
        "bad",
    )
    assert error.prompt is None and error.attempts == 0 and error.stage == "generate"
    assert error.source == SourceOffset(topic="run.prompts", partition=2, offset=7)
    assert (error.run_id, error.server) == ("run", "http://s")
    assert LETTERS.undecodable(record(None), ValueError("bad")).id == "run.prompts+2+7"


def test_an_unexpected_failure_is_named_by_the_key_without_the_prompt() -> None:
    error = LETTERS.unexpected(record(b""), KeyError("x"))
    assert error.id == "run.prompts+2+7" and error.error_type == "KeyError"
    assert error.message == "unexpected failure in the consumer: 'x'"
    assert error.prompt is None and error.raw is None and error.attempts == 0


def test_a_prompts_failures_carry_the_prompt_its_attempt_and_the_servers_verdict() -> None:
    prompt = PromptRecord(
        id="p-9",
        messages=make_prompt(9).messages,
        metadata=make_prompt(9).metadata,
        run_id="other",
        attempt=2,
    )
    foreign = LETTERS.foreign(record(b"p-9"), prompt, "of another run")
    assert (foreign.id, foreign.attempt, foreign.prompt) == ("p-9", 2, prompt)
    assert foreign.error_type == FOREIGN_RUN_PROMPT and foreign.attempts == 0
    fatal = LETTERS.failed(record(b"p-9"), prompt, FatalRequestError("x" * 3000, status=400), 1)
    assert (fatal.status, fatal.retriable, fatal.attempts, len(fatal.message)) == (400, False, 1, 2000)
    exhausted = LETTERS.failed(record(b"p-9"), prompt, RetriableServerError("busy", status=503), 5)
    assert (exhausted.error_type, exhausted.status, exhausted.retriable) == (
        "RetriableServerError",
        503,
        True,
    )
    too_large = LETTERS.failed(record(b"p-9"), prompt, MessageSizeTooLargeError("big"), 1)
    assert too_large.status is None and not too_large.retriable


def test_a_completion_records_the_answer_its_request_and_its_timings() -> None:
    prompt = make_prompt(3, max_tokens=50)
    body = chat_request_body(prompt, "kg-1", GenerationSettings())
    result = ChatResult(
        content="6",
        reasoning_content="3+3",
        tool_calls=None,
        finish_reason="stop",
        usage=Usage(prompt_tokens=5, completion_tokens=2),
        model="m",
        latency_s=1.5,
    )
    job = Job(record=record(b"p-00003"), fetched_at=100.0)
    completion = completion_record(
        job, prompt, body, result, 102.0, run_id="run", server="http://s", consumer="c0"
    )
    assert (completion.id, completion.content, completion.model, completion.consumer) == (
        "p-00003",
        "6",
        "m",
        "c0",
    )
    assert completion.params["max_tokens"] == 50 and "messages" not in completion.params
    assert completion.timings.queued_s == 2.0 and completion.timings.finished_at == 103.5
    assert completion.source == SourceOffset(topic="run.prompts", partition=2, offset=7)
    assert isinstance(completion.quality, list)


def test_every_kafka_error_but_a_record_too_large_is_an_outage_to_wait_out() -> None:
    assert kafka_outage(KafkaTimeoutError()) and kafka_outage(NotLeaderForPartitionError())
    assert not kafka_outage(MessageSizeTooLargeError()) and not kafka_outage(ValueError())
