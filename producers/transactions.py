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

    aiokafka then refuses sends with ``IllegalOperation`` and a commit or a new transaction with
    an ``AssertionError``, and keeps the cause only in its transaction manager's private
    ``_transaction_waiter`` future (aiokafka 0.14: ``AIOKafkaProducer._txn_manager`` in
    ``aiokafka/producer/producer.py``, a ``TransactionManager`` whose ``_transaction_waiter`` is set
    in ``aiokafka/producer/transaction_manager.py``): checked here so the cause is what gets raised.
    Without those attributes (another aiokafka) it returns ``None``.
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

    When a transaction fails (fenced by a newer producer, broker gone), aiokafka sets the error on
    futures of its own that nobody awaits any more; asyncio would print each with a traceback. The
    error has already been raised to :func:`producers.cli.main`, which prints it as one line, and
    the transaction was not committed, so these reports carry no information.
    """
    if isinstance(context.get("exception"), KafkaError) and "never retrieved" in context.get("message", ""):
        return
    loop.default_exception_handler(context)
