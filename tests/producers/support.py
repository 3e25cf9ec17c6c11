"""What the producer's process tests share: the command-line flags that point it at a test's
settings."""

from __future__ import annotations

from streams.config import Settings


def flags(settings: Settings) -> list[str]:
    """The CLI flags that point the producer at this test's broker, topics and run."""
    return [
        "--kafka.bootstrap-servers",
        settings.kafka.bootstrap_servers,
        "--topics.prompts",
        settings.topics.prompts,
        "--topics.producer-progress",
        settings.topics.producer_progress,
        "--topics.partitions",
        str(settings.topics.partitions),
        "--run-id",
        settings.run_id,
        "--no-progress",
    ]
