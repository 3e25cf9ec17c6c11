"""What a replay may be (docs/runs.md): checked by the main job before anything of the replay
starts or is created, with the run's own Kafka settings."""

from __future__ import annotations

from streams.config import Settings
from streams.errors import ConfigError
from streams.kafka import topic_partitions
from streams.runs import naming
from streams.runs.record import read_run_record

__all__ = ["check_replay"]


async def check_replay(settings: Settings) -> None:
    """Check that run ``settings.run_id`` (``B``) can replay run ``settings.replay_of`` (``A``):
    ``A`` has a prompts topic, and ``B`` is new or already a replay of ``A`` (re-running resumes
    it). Nothing when the run is not a replay.

    Raises:
        ConfigError: ``A`` has no prompts topic (the message names ``A``'s own parent when ``A`` is
            a replay), or ``B`` is a run with prompts of its own or a replay of another run (a
            replay would mix its results into ``B``'s).
        aiokafka.errors.KafkaError, TimeoutError: Kafka did not answer.
    """
    new, parent = settings.run_id, settings.replay_of
    if parent is None:
        return
    if not await topic_partitions(settings.kafka, settings.topics.prompts):
        record = await read_run_record(naming.for_run(settings, parent, replay_of=None))
        if record is not None and record.parent is not None:
            raise ConfigError(
                f"run {parent} is itself a replay of run {record.parent}: its prompts are "
                f"{record.parent}'s; replay that run (kafkagen replay {record.parent} --as {new})"
            )
        raise ConfigError(
            f"run {parent} has no prompts topic {settings.topics.prompts}: nothing to replay "
            "(is the run id right? kafkagen runs lists the runs)"
        )
    own = naming.prompts_topic(new)
    if await topic_partitions(settings.kafka, own):
        raise ConfigError(
            f"run {new} exists and has prompts of its own ({own}): a replay under its id would mix "
            f"{parent}'s results into its dataset; choose a new run id for the replay"
        )
    record = await read_run_record(settings)
    if record is not None and record.parent != parent:
        what = f"a replay of run {record.parent}" if record.parent else "a run of its own"
        raise ConfigError(
            f"run {new} exists and is {what}, not a replay of run {parent}: choose a new run id for "
            "the replay"
        )
