"""The one place that turns :class:`streams.config.KafkaSettings` into aiokafka client arguments.

Every producer, consumer and admin client is built from :func:`client_kwargs`, so security
settings (SASL_SSL with SCRAM, TLS CA) and size limits are applied once. Argument names are
aiokafka's (``aiokafka.AIOKafkaProducer`` / ``AIOKafkaConsumer`` / ``AIOKafkaAdminClient``).
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.group import LeaveGroupRequest

from streams.config import KafkaSettings

log = logging.getLogger("kafkagen.kafka")


def client_kwargs(settings: KafkaSettings, *, role: str) -> dict[str, Any]:
    """Connection and security arguments shared by every aiokafka client.

    Args:
        role: appended to the client id (``kafkagen-producer``), visible in broker logs.
    """
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": f"{settings.client_id}-{role}",
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kwargs["ssl_context"] = create_ssl_context(
            cafile=settings.ssl_cafile, certfile=settings.ssl_certfile, keyfile=settings.ssl_keyfile
        )
    if settings.security_protocol.startswith("SASL"):
        kwargs["sasl_mechanism"] = settings.sasl_mechanism or "PLAIN"
        kwargs["sasl_plain_username"] = settings.sasl_username
        kwargs["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return kwargs


def producer_kwargs(settings: KafkaSettings) -> dict[str, Any]:
    """Arguments for an idempotent ``AIOKafkaProducer`` (acks=all, zstd, sized for
    ``max_message_bytes``). Idempotence makes broker-side retries duplicate-free per partition
    (Kafka KIP-98)."""
    return {
        **client_kwargs(settings, role="producer"),
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": "zstd",
        "linger_ms": 20,
        "max_batch_size": 1024 * 1024,
        "max_request_size": settings.max_message_bytes,
    }


def consumer_kwargs(settings: KafkaSettings, *, group_id: str | None) -> dict[str, Any]:
    """Arguments for an ``AIOKafkaConsumer`` with manual commits (``enable_auto_commit=False``)
    and fetch sizes large enough for ``max_message_bytes`` records."""
    return {
        **client_kwargs(settings, role="consumer"),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": settings.max_message_bytes,
        "fetch_max_bytes": max(settings.max_message_bytes, 50 * 1024 * 1024),
        "isolation_level": "read_committed",
    }


def unreachable_message(settings: KafkaSettings, exc: BaseException) -> str:
    """The one-line error entry points print when Kafka cannot be reached (exit status 3)."""
    name, text = type(exc).__name__, str(exc)
    detail = text if text.startswith(name) else f"{name}: {text}" if text else name
    return f"error: Kafka at {settings.bootstrap_servers}: {detail}"


async def remove_group_member(settings: KafkaSettings, group: str, member_id: str) -> bool:
    """Remove ``member_id`` from consumer group ``group`` now (a LeaveGroup request sent to the
    group's coordinator on the member's behalf); True when the broker accepted it.

    For a static member (``group.instance.id``, KIP-345), whose client sends no LeaveGroup on close
    (aiokafka 0.14 ``consumer/group_coordinator.py`` ``_maybe_leave_group``; the Java client
    likewise), so that a restart within ``session.timeout.ms`` keeps its partitions. When the
    member leaves for good (its server is dead, or it is scaled down) this moves its partitions at
    once instead of after the session timeout. Call it after the member's consumer has stopped,
    so it cannot rejoin meanwhile. Best effort: failures are logged, never raised; the broker still
    expires the member after the session timeout.
    """
    if not member_id:
        return False
    admin = AIOKafkaAdminClient(**client_kwargs(settings, role="admin"))
    try:
        await admin.start()
        node = await admin.find_coordinator(group)
        response = await admin._send_request(LeaveGroupRequest(group, member_id), node)
        if response.error_code:
            raise for_code(response.error_code)(f"LeaveGroup for {member_id}")
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning(
            "could not remove member %s from group %s (%s): its partitions move after the session timeout",
            member_id,
            group,
            exc,
        )
        return False
    finally:
        await admin.close()
    log.info("removed member %s from group %s: its partitions move now", member_id, group)
    return True
