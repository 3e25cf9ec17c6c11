"""``streams.bounded.within``: a step that may hang is given up without cancelling its caller."""

from __future__ import annotations

import asyncio

import pytest

from streams.bounded import within


async def test_a_finished_step_gives_its_result_and_a_failed_one_its_error() -> None:
    async def answer() -> int:
        return 7

    async def refuse() -> None:
        raise ValueError("no")

    assert await within(1.0, answer()) == (True, 7)
    with pytest.raises(ValueError, match="no"):
        await within(1.0, refuse())


async def test_a_step_that_never_ends_is_cancelled_and_its_caller_goes_on() -> None:
    """Even a step that swallows its cancellation (as closing a Kafka client can) leaves the
    caller free: the caller's next awaits are not cancelled."""
    cancelled = asyncio.Event()
    release = asyncio.Event()

    async def hang() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()  # swallowed: the step goes on after its cancel

    assert await within(0.05, hang()) == (False, None)
    await asyncio.wait_for(cancelled.wait(), 5)
    await asyncio.sleep(0)  # the caller itself was not cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    release.set()


async def test_a_step_cancelled_from_within_is_not_the_callers_cancellation() -> None:
    """A library task cancelled under the step (aiokafka's coordinator, on close) must not end the
    caller as if it had been cancelled itself."""

    async def cancelled_inside() -> None:
        inner = asyncio.ensure_future(asyncio.Event().wait())
        inner.cancel()
        await inner  # raises CancelledError in the step

    assert await within(1.0, cancelled_inside()) == (False, None)
    await asyncio.sleep(0)
