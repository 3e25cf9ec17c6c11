"""The one owner of every name derived from a run id (the rule and the table of names: ``docs/runs.md``).

A run ``R`` owns, unless a setting names something else: its topics (``R.prompts``, or
``A.prompts`` when ``R`` is a replay of ``A``; ``R.completions``, ``R.errors``, ``R.control``), its
groups (``<consumer.group>.R``, ``<sink.group>.R``), its S3 folder, its local dataset folder
(``<home>/datasets/R``), the producer's progress keys and transactional ids, and its consumers'
server slugs. Empty topic settings mean "derived"
(:func:`fill_topic_names`); switch runs with :func:`for_run`, not ``model_copy``.
"""

from __future__ import annotations

import enum
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

__all__ = [
    "KEEP",
    "TOPIC_ROLES",
    "check_not_self_replay",
    "check_run_id",
    "completions_topic",
    "control_topic",
    "dataset_folder",
    "derived_topics",
    "errors_topic",
    "fill_topic_names",
    "for_run",
    "generate_group",
    "progress_key",
    "progress_key_prefix",
    "prompts_topic",
    "run_folder",
    "server_slug",
    "sink_group",
    "transactional_id",
]

if TYPE_CHECKING:
    from streams.config import Settings

TOPIC_ROLES: Final = ("prompts", "completions", "errors", "control")
"""The topic settings derived from the run id (``topics.<role>``)."""


class _Keep(enum.Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP
"""For :func:`for_run`: keep the settings' ``replay_of``."""


def check_run_id(run_id: str, *, what: str = "run_id") -> str:
    """``run_id`` unchanged when it can name a run: S3 keys and topic names are built from it.

    Raises:
        ValueError: empty, starts with ``.``, or contains ``/``, ``+`` or whitespace; the message
            names ``what`` (the setting) and the value.
    """
    if not run_id or any(c in run_id for c in "/+ \t\n") or run_id.startswith("."):
        raise ValueError(
            f"{what} {run_id!r} must be non-empty, not start with '.' and contain no '/', '+' or whitespace"
        )
    return run_id


def prompts_topic(run_id: str, replay_of: str | None = None) -> str:
    """The prompts topic of run ``run_id``: ``<run_id>.prompts``, or ``<replay_of>.prompts`` when
    the run is a replay of run ``replay_of``."""
    return f"{replay_of or run_id}.prompts"


def completions_topic(run_id: str) -> str:
    """The completions topic of run ``run_id``: ``<run_id>.completions``."""
    return f"{run_id}.completions"


def errors_topic(run_id: str) -> str:
    """The dead-letter topic of run ``run_id``: ``<run_id>.errors``."""
    return f"{run_id}.errors"


def control_topic(run_id: str) -> str:
    """The control topic of run ``run_id``: ``<run_id>.control`` (a replay has its own: its gate and
    members are its own)."""
    return f"{run_id}.control"


def derived_topics(run_id: str, replay_of: str | None = None) -> dict[str, str]:
    """``{"prompts": ..., "completions": ..., "errors": ..., "control": ...}``: the topic names run
    ``run_id`` (a replay of ``replay_of`` when set) derives."""
    return {
        "prompts": prompts_topic(run_id, replay_of),
        "completions": completions_topic(run_id),
        "errors": errors_topic(run_id),
        "control": control_topic(run_id),
    }


def generate_group(settings: Settings) -> str:
    """The generation consumers' group id: ``<consumer.group>.<run_id>``. One group per run, so a
    new run id reads its prompts topic from the start and a re-run of the same id resumes. A replay
    (``replay_of``) has its own group, so it regenerates every prompt of the replayed run."""
    return f"{settings.consumer.group}.{settings.run_id}"


def sink_group(settings: Settings) -> str:
    """The S3 sink's consumer group and faust app id: ``<sink.group>.<run_id>`` (its committed
    offsets must describe the same stream as the run's S3 folder, docs/sink.md)."""
    return f"{settings.sink.group}.{settings.run_id}"


def progress_key(prompts_topic: str, run_id: str, identity: str) -> bytes:
    """The producer-progress topic key of one input published to ``prompts_topic`` by run ``run_id``:
    JSON ``[prompts_topic, run_id, identity]`` (UTF-8, no spaces). ``identity`` is the input's
    (:class:`streams.inputs.OpenedInput`): its resolved path, ``s3://`` URI or stdin digest. Resume
    points are found by this key: its bytes must never change."""
    return msgspec.json.encode([prompts_topic, run_id, identity])


def progress_key_prefix(prompts_topic: str, run_id: str) -> bytes:
    """The bytes every :func:`progress_key` of ``prompts_topic`` and run ``run_id`` starts with:
    ``["<prompts topic>","<run id>",``."""
    return msgspec.json.encode([prompts_topic, run_id])[:-1] + b","


def transactional_id(prompts_topic: str, run_id: str, identity: str) -> str:
    """The Kafka ``transactional_id`` of the producer publishing one input (arguments as
    :func:`progress_key`): ``kafkagen-prompts-`` and the 24 hex digits of a 12-byte BLAKE2b of the
    progress key. Stable, so a re-run's producer fences a dead one of the same input and the broker
    aborts its open transaction; its bytes must never change."""
    key = progress_key(prompts_topic, run_id, identity)
    return "kafkagen-prompts-" + hashlib.blake2b(key, digest_size=12).hexdigest()


def server_slug(url: str) -> str:
    """A server URL as a part of a name: its host, port and path in letters, digits and ``-``,
    then 8 hex digits of the BLAKE2b of the URL (trailing slashes aside), so two URLs never share
    a name (``http://gpu-0:30000`` and ``http://gpu.0:30000`` read alike)."""
    key = url.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9]+", "-", key.split("://", 1)[-1]).strip("-")
    return f"{readable}-{hashlib.blake2b(key.encode(), digest_size=4).hexdigest()}"


def run_folder(prefix: str, run_id: str) -> str:
    """The S3 folder of run ``run_id``: ``<prefix>/<run_id>/`` (``<run_id>/`` for an empty prefix;
    slashes around ``prefix`` are dropped).

    Raises:
        ValueError: ``run_id`` cannot name a run (:func:`check_run_id`).
    """
    check_run_id(run_id)
    clean = prefix.strip("/")
    return f"{clean}/{run_id}/" if clean else f"{run_id}/"


def dataset_folder(home: str, run_id: str) -> Path:
    """The local dataset folder of run ``run_id``: ``<home>/datasets/<run_id>``, absolute (``home``,
    the ``home`` setting, resolved against the working directory). The main job exports there unless
    ``--to`` says otherwise, and so does ``kafkagen export`` without ``--to``.

    Raises:
        ValueError: ``run_id`` cannot name a run (:func:`check_run_id`).
    """
    return Path(home).resolve() / "datasets" / check_run_id(run_id)


def fill_topic_names(data: Any) -> Any:
    """``Settings`` input data with every empty topic name (``topics.prompts``, ``.completions``,
    ``.errors``, ``.control``) replaced by the name derived from ``data["run_id"]`` (default ``default``) and
    ``data["replay_of"]``. ``data["topics"]`` may be missing, a dict or a ``TopicSettings``;
    anything that is not a dict is returned unchanged (pydantic reports it). Used by
    :class:`streams.config.Settings` as a ``model_validator(mode="before")``."""
    if not isinstance(data, dict):
        return data
    run_id = data.get("run_id") or "default"
    replay_of = data.get("replay_of") or None
    if not isinstance(run_id, str) or not (replay_of is None or isinstance(replay_of, str)):
        return data  # a mistyped value: the field validators say what is wrong
    derived = derived_topics(run_id, replay_of)
    topics = data.get("topics")
    if topics is None:
        return {**data, "topics": derived}
    if isinstance(topics, dict):
        return {**data, "topics": {**topics, **{r: derived[r] for r in TOPIC_ROLES if not topics.get(r)}}}
    if hasattr(topics, "model_copy"):
        empty = {r: derived[r] for r in TOPIC_ROLES if not getattr(topics, r, "x")}
        return {**data, "topics": topics.model_copy(update=empty)} if empty else data
    return data


def for_run(settings: Settings, run_id: str, *, replay_of: str | _Keep | None = KEEP) -> Settings:
    """``settings`` switched to run ``run_id`` (and, when given, declared a replay of ``replay_of``,
    ``None``: not a replay), with the names re-derived: each topic name that is the one the old run
    derived becomes the new run's; a topic named explicitly (any other name) is kept. Groups and the
    S3 folder follow the run id by themselves.

    Raises:
        ValueError: ``run_id`` or ``replay_of`` cannot name a run (:func:`check_run_id`), or the
            run would be a replay of itself.
    """
    new_replay = settings.replay_of if replay_of is KEEP else replay_of
    assert not isinstance(new_replay, _Keep)
    check_run_id(run_id)
    if new_replay is not None:
        check_run_id(new_replay, what="replay_of")
        check_not_self_replay(run_id, new_replay)
    old = derived_topics(settings.run_id, settings.replay_of)
    new = derived_topics(run_id, new_replay)
    update = {r: new[r] for r in TOPIC_ROLES if getattr(settings.topics, r) == old[r]}
    topics = settings.topics.model_copy(update=update)
    return settings.model_copy(update={"run_id": run_id, "replay_of": new_replay, "topics": topics})


def check_not_self_replay(run_id: str, replay_of: str | None) -> None:
    """Raises ``ValueError`` when ``replay_of`` is ``run_id`` (a run cannot replay itself: re-running
    the same run id resumes it)."""
    if replay_of is not None and replay_of == run_id:
        raise ValueError(
            f"replay_of {replay_of!r} is the run id itself: a replay regenerates another run's prompts "
            "under a new run id; to resume this run, drop --replay-of (KAFKAGEN_REPLAY_OF)"
        )
