"""Which run the prompts topic belongs to, as the producer checks it before publishing.

The prompts topic is ``<run id>.prompts`` unless ``--topics.prompts`` names another
(:mod:`streams.runs.naming`), and every record carries the run id. A prompts topic belongs to one run
(``docs/runs.md``): publishing into a topic whose records carry another run id is refused with
exit 2 before anything is sent (to generate run A's prompts again under a new run id, start the
consumers with ``--replay-of A`` instead). Publishing again under the same run id resumes.
"""

from __future__ import annotations

from streams.config import Settings
from streams.errors import ForeignRunError
from streams.runs import naming
from streams.runs.ownership import describe_owners, foreign_owners, topic_owners

__all__ = ["check_topic_owner"]


async def check_topic_owner(settings: Settings) -> None:
    """Refuse to publish into a prompts topic that belongs to another run (``docs/runs.md``):
    its first records carry another ``run_id`` (:func:`streams.runs.ownership.topic_owners`). A topic of
    this run id (a re-run: exactly-once resume), an empty one and one without run ids are fine.

    Raises:
        ForeignRunError: the topic belongs to another run; the message names it and the fix.
        KafkaError, TimeoutError: Kafka could not be asked.
    """
    topic, run = settings.topics.prompts, settings.run_id
    foreign = foreign_owners(await topic_owners(settings, topic), [run])
    if not foreign:
        return
    other = foreign[0]
    if settings.replay_of is not None:
        raise ForeignRunError(
            f"prompts topic {topic} belongs to {describe_owners(foreign)}, and run {run} is declared a "
            f"replay of run {settings.replay_of} (replay_of): a replay publishes nothing, it regenerates the "
            f"prompts already on {topic}: start the consumers with --replay-of {settings.replay_of}; to "
            f"publish new prompts for run {run}, unset KAFKAGEN_REPLAY_OF (they go to "
            f"{naming.prompts_topic(run)})"
        )
    raise ForeignRunError(
        f"prompts topic {topic} belongs to {describe_owners(foreign)}, not run {run}: nothing was published. "
        f"Publish to {naming.prompts_topic(run)} (the default: drop --topics.prompts / "
        f"KAFKAGEN_TOPICS__PROMPTS) or regenerate run {other} with `--replay-of {other}` on the consumers "
        "(docs/runs.md)"
    )
