"""After a successful export: its :class:`streams.control.ExportReport` on the run's control topic
(key ``export``), where ``kafkagen status`` and the dashboard read the latest export.

Best effort: the dataset and its manifest are written already, so a Kafka that does not take the
report is a warning, not a failed export.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import msgspec
from aiokafka.errors import KafkaError

from streams.config import Settings
from streams.control import ControlLog, ExportReport, read_control
from streams.topics import ensure_topics, topic_specs

__all__ = ["export_report", "publish_export_report", "regenerations_of"]

log = logging.getLogger("kafkagen.export")


def export_report(run_id: str, manifest: dict[str, Any], destination: str) -> ExportReport:
    """The report of an export from its manifest (:mod:`sinks.export.manifest`): ids in the
    dataset, completions and errors written, ids missing, duplicate records dropped."""
    records = manifest["records"]
    return ExportReport(
        run_id=run_id,
        at=time.time(),
        ids=records["ids"],
        completions=records["completions"],
        errors=records["errors"],
        missing=manifest["missing"]["count"],
        duplicates_dropped=manifest["duplicates"]["records_dropped"],
        destination=destination,
        host=socket.gethostname(),
    )


async def publish_export_report(settings: Settings, report: ExportReport, *, timeout_s: float = 30.0) -> bool:
    """Write ``report`` to ``settings.topics.control`` (made if missing: one partition, compacted,
    :func:`streams.topics.topic_specs`); True when the broker acknowledged it. Failures are logged
    as a warning and return False."""
    control = ControlLog(settings)
    try:
        async with asyncio.timeout(timeout_s):
            await ensure_topics(settings, [topic_specs(settings)["control"]], timeout_s=timeout_s)
            await control.start(timeout_s=timeout_s)
            await control.publish(report)
    except (KafkaError, TimeoutError, OSError) as exc:
        log.warning(
            "the export is written, but its report could not be put on %s (%r): kafkagen status shows "
            "the previous export",
            settings.topics.control,
            exc,
        )
        return False
    finally:
        await control.stop()
    return True


async def regenerations_of(settings: Settings, *, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The run's ``kafkagen regenerate`` records (:class:`streams.control.RegenerateRecord`, as
    dicts, oldest first) from its control topic; empty when it has none or no control topic.

    Raises:
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer within ``timeout_s`` seconds.
    """
    state = await read_control(settings, timeout_s=timeout_s)
    records = sorted(state.regenerations.values(), key=lambda r: r.at)
    return [msgspec.to_builtins(r) for r in records]
