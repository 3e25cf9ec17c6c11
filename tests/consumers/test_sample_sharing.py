"""One request for a prompt's samples (consumers.process, consumers.sample_groups) against a fake
server, in one event loop: the schedules that could leave a sample waiting forever or send it
again without a pause. The end-to-end behaviour is tests/consumers/test_parallel_samples.py."""

from __future__ import annotations

import asyncio
import random
import types
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from consumers.dead_letters import DeadLetters
from consumers.positions.jobs import Job
from consumers.process import PromptRunner
from consumers.sample_groups import worth_sharing
from consumers.servers.answers import ChatResult
from consumers.servers.base import ServerInfo
from consumers.servers.requests import chat_request_body
from streams.config import Settings
from streams.errors import FatalRequestError, RetriableServerError, ServerError
from streams.inputs.samples import sampled
from streams.records import ErrorRecord, GenerationParams, PromptRecord, Usage, encode
from tests.helpers import make_prompt

Answer = Callable[[dict[str, Any]], list[ChatResult]]


def long_prompt(i: int, *, max_tokens: int = 64) -> PromptRecord:
    """A prompt long enough beside its budget to share (consumers.sample_groups.worth_sharing)."""
    return make_prompt(i, max_tokens=max_tokens, content="Read this. " + "word " * 600)


def answers_for(body: dict[str, Any]) -> list[ChatResult]:
    usage = Usage(prompt_tokens=5, completion_tokens=2 * body.get("n", 1), shared_by=body.get("n", 1))
    return [ChatResult(f"answer {k}", None, None, "stop", usage, "m", 0.01) for k in range(body.get("n", 1))]


class Fake:
    """A PromptRunner whose server answers with ``answer(body)`` (or raises what it returns)."""

    def __init__(self, answer: Callable[[dict[str, Any]], list[ChatResult] | ServerError]) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.out: list[tuple[str, str]] = []
        self.delays: list[int] = []
        fake = self

        class Client:
            info = ServerInfo(url="s", kind="sglang", model="m", max_running_requests=16, context_length=None,
                              parallel_samples=True)  # fmt: skip

            def request_body(self, prompt: PromptRecord, rid: str) -> dict[str, Any]:
                return chat_request_body(prompt, rid, Settings().generation, model="m")

            async def chat_choices(self, body: dict[str, Any]) -> list[ChatResult]:
                fake.bodies.append(body)
                await asyncio.sleep(0)
                result = answer(body)
                if isinstance(result, ServerError):
                    raise result
                return result

        class Emitter:
            async def completion(self, job: Job, p: PromptRecord, *a: object, **k: object) -> None:
                fake.out.append(("completion", p.id))

            async def failure(self, job: Job, p: PromptRecord, exc: Exception, sends: int) -> None:
                fake.out.append(("dead letter", p.id))

            async def error(self, job: Job, error: ErrorRecord) -> None:
                fake.out.append(("error", error.message))

        noop = types.SimpleNamespace
        server = noop(ok=asyncio.Event(), abandon=asyncio.Event(), server_url="s")
        server.record_success = server.record_failure = server.observe_output = lambda *a, **k: None
        server.ok.set()
        window = noop(observe_completion=lambda *a: None, observe_overload=lambda *a: None)

        def delay(failures: int, rng: random.Random) -> float:
            fake.delays.append(failures)
            return 0.0

        self.runner = PromptRunner(
            Settings(run_id="r"),
            prompts_topic="r.prompts",
            client=Client(),  # type: ignore[arg-type]
            server=server,  # type: ignore[arg-type]
            window=lambda: window,  # type: ignore[arg-type,return-value]
            emitter=Emitter(),  # type: ignore[arg-type]
            dead_letters=DeadLetters("r", "s"),
            backoff=noop(delay=delay),  # type: ignore[arg-type]
            rng=random.Random(0),
            metrics=noop(retries=noop(inc=lambda: None)),  # type: ignore[arg-type]
            stats=noop(invalid_retries=0, retries=0, shared_requests=0),  # type: ignore[arg-type]
            answered=lambda job: None,
        )

    def start(self, prompt: int, samples: int = 4, *, max_tokens: int = 64) -> list[asyncio.Task[None]]:
        """The tasks of one prompt's samples, started in one turn as the consumer starts them."""
        records = sampled(
            msgspec.structs.replace(long_prompt(prompt, max_tokens=max_tokens), run_id="r"), samples
        )
        tasks = []
        for offset, sample in enumerate(records):
            record = types.SimpleNamespace(
                value=encode(sample), partition=0, offset=offset, key=b"k", topic="r.prompts"
            )
            tasks.append(asyncio.create_task(self.runner.run(Job(record=record, fetched_at=0))))
        return tasks


async def finish(tasks: list[asyncio.Task[None]]) -> None:
    async with asyncio.timeout(5):  # a hang fails here, not at the test's timeout
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_siblings_started_together_share_one_request() -> None:
    fake = Fake(answers_for)
    await finish(fake.start(1))
    assert [b.get("n") for b in fake.bodies] == [4] and len(fake.out) == 4
    assert fake.runner.groups.hidden == 0 and not fake.runner.groups._open


async def test_a_short_prompt_with_a_long_budget_sends_each_sample_alone() -> None:
    """Where the copies' uneven lengths would cost more than the prefills saved (BENCHMARKS.md)."""
    fake = Fake(answers_for)
    await finish(fake.start(1, max_tokens=4096))
    assert [b.get("n") for b in fake.bodies] == [None] * 4 and len(fake.out) == 4
    assert len({b["seed"] for b in fake.bodies}) == 4, "each its own seed"


def test_worth_sharing_weighs_the_prompt_against_its_budget() -> None:
    messages = [{"role": "user", "content": "x" * 4000}]  # ~1,000 tokens
    assert worth_sharing(messages, None, 100) and not worth_sharing(messages, None, 200)
    assert worth_sharing([{"role": "user", "content": "hi"}], [{"function": {"d": "y" * 4000}}], 100)


async def test_a_sender_cancelled_before_it_sends_leaves_no_sibling_waiting() -> None:
    fake = Fake(answers_for)
    tasks = fake.start(1)
    await asyncio.sleep(0)  # every sibling has joined; the sender is at its yield
    tasks[0].cancel()
    await finish(tasks)
    assert sorted(p for _, p in fake.out) == ["p-00001#1", "p-00001#2", "p-00001#3"], "the others, alone"
    assert not fake.runner.groups._open, "no stale group for the next siblings to join"
    fake.out.clear()
    await finish(fake.start(2))
    assert len(fake.out) == 4 and fake.bodies[-1].get("n") == 4, "later siblings still share"


async def test_a_retriable_failure_of_the_shared_request_is_each_samples_first_failure() -> None:
    calls = iter([RetriableServerError("busy", status=503)])

    def answer(body: dict[str, Any]) -> list[ChatResult] | ServerError:
        return next(calls, None) or answers_for(body)

    fake = Fake(answer)
    await finish(fake.start(1))
    assert len(fake.out) == 4 and all(kind == "completion" for kind, _ in fake.out)
    assert fake.delays == [1, 1, 1, 1], "each sample waits one backoff before it is sent alone"
    assert fake.runner.stats.retries == 4 and fake.runner.groups.hidden == 0


@pytest.mark.parametrize("alone_ok", [True, False])
async def test_a_refused_shared_request_turns_sharing_off_only_when_alone_requests_pass(
    alone_ok: bool,
) -> None:
    def answer(body: dict[str, Any]) -> list[ChatResult] | ServerError:
        if body.get("n", 1) > 1 or not alone_ok:
            return FatalRequestError("HTTP 400: refused", status=400)
        return answers_for(body)

    fake = Fake(answer)
    await finish(fake.start(1))
    kinds = {kind for kind, _ in fake.out}
    assert len(fake.out) == 4 and kinds == ({"completion"} if alone_ok else {"dead letter"})
    assert (fake.runner.sharing_refused is not None) is alone_ok, "a prompt's own 400 keeps sharing on"


async def test_a_record_whose_extra_body_sets_kafkagens_own_fields_is_dead_lettered() -> None:
    """The producer refuses such a row; a record published by other means is refused here, not sent
    with its ``n`` or ``rid`` overriding the consumer's."""
    fake = Fake(answers_for)
    bad = msgspec.structs.replace(make_prompt(1), run_id="r", params=GenerationParams(extra_body={"n": 3}))
    record = types.SimpleNamespace(value=encode(bad), partition=0, offset=0, key=b"k", topic="r.prompts")
    await fake.runner.run(Job(record=record, fetched_at=0))
    [(kind, message)] = fake.out
    assert kind == "error" and "extra_body may not set 'n'" in message and not fake.bodies
