"""What the producer needs to know about a transaction that aiokafka does not tell through its
public API: the error that failed the open transaction, and asyncio's reports of the futures
aiokafka abandons with it. The only module that reads aiokafka's private attributes.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiokafka.errors import KafkaError

__all__ = ["failed_transaction", "quiet_abandoned_kafka_futures", "transaction_failure"]


def failed_transaction(producer: Any) -> BaseException | None:
    """The error that failed the producer's open transaction (for example ``ProducerFenced`` once
    a newer producer with the same transactional id started), or ``None``.

    aiokafka keeps the cause only in a private future (aiokafka 0.14: ``AIOKafkaProducer._txn_manager``,
    ``aiokafka/producer/producer.py``; its ``_transaction_waiter``,
    ``aiokafka/producer/transaction_manager.py``; ``docs/producer.md``, "Exactly once"). Without
    those attributes (another aiokafka) it returns ``None``.
    """
    waiter = getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None)
    if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
        error: BaseException | None = waiter.exception()
        return error
    return None


def transaction_failure(producer: Any) -> BaseException:
    """:func:`failed_transaction`, or a generic ``KafkaError`` when aiokafka did not keep one."""
    return failed_transaction(producer) or cast(
        BaseException, KafkaError("the open transaction failed; run the same command again to continue")
    )


def quiet_abandoned_kafka_futures(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Event-loop exception handler: drop asyncio's "Future exception was never retrieved" report
    for a Kafka error, pass everything else to the default handler.

    The futures aiokafka abandons with a failed transaction carry an error already raised to
    :func:`producers.cli.main` (``docs/producer.md``, "Exactly once").
    """
    if isinstance(context.get("exception"), KafkaError) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)
