"""Settings and environment variables: the variables that reproduce settings in a child process
(:func:`settings_to_env`), those every S3 client needs (:func:`aws_environment`), and the
``KAFKAGEN_*`` variables that name no setting (:func:`unknown_environment`)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, SecretStr
from pydantic_settings import BaseSettings

__all__ = [
    "ENV_GROUPS_ELSEWHERE",
    "ENV_PREFIX",
    "aws_environment",
    "settings_to_env",
    "unknown_environment",
]

ENV_PREFIX: Final = "KAFKAGEN_"
"""The prefix of every kafkagen environment variable."""

ENV_GROUPS_ELSEWHERE: Final[frozenset[str]] = frozenset({"stack"})
"""``KAFKAGEN_<GROUP>__`` groups read by another owner: ``stack``, the local stack's
(:class:`launch.stack.settings.StackSettings`)."""


def _group_fields(cls: type[BaseSettings], name: str) -> list[str]:
    """The fields of settings group ``name`` (empty: not a group)."""
    annotation = cls.model_fields[name].annotation
    return (
        list(annotation.model_fields)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel)
        else []
    )


def _misjoined(cls: type[BaseSettings], groups: list[str], rest: str) -> str | None:
    """The group of ``<group>_<field>`` (one ``_`` where ``__`` belongs) when ``field`` is one of
    its settings, else None (``KAFKAGEN_SINK_TEST_PAUSE`` is a test's variable, not a setting)."""
    for group in groups:
        if rest.startswith(group + "_") and rest.removeprefix(group + "_") in _group_fields(cls, group):
            return group
    return None


def unknown_environment(cls: type[BaseSettings], environ: Mapping[str, str]) -> list[str]:
    """One line per variable of ``environ`` under ``cls``'s prefix that names no setting of it.

    pydantic-settings refuses an unknown field of a known group itself but ignores an unknown
    top-level name, so a misspelt ``KAFKAGEN_GENRATION__MAX_TOKENS`` or ``KAFKAGEN_RUNID`` would
    silently fall back to a default. Refused here: a group that is neither ``cls``'s nor in
    :data:`ENV_GROUPS_ELSEWHERE`; a top-level name close to one of ``cls``'s (the prefix also
    carries variables that are no settings, e.g. ``KAFKAGEN_AUDIT_TRACE``); a group's setting with
    one ``_`` where ``__`` belongs (``KAFKAGEN_GENERATION_MAX_TOKENS``); a top-level setting under
    another owner's group (``KAFKAGEN_STACK__HOME``); for a class without
    groups (its prefix its own, e.g. ``KAFKAGEN_STACK__``), any name that is not its field.
    """
    prefix = (cls.model_config.get("env_prefix") or "").upper()
    delimiter = cls.model_config.get("env_nested_delimiter")
    fields = list(cls.model_fields)
    lines = []
    for name in sorted(environ):
        if not name.upper().startswith(prefix):
            continue
        rest = name[len(prefix) :].lower()
        if rest in fields:
            continue
        groups = [f for f in fields if delimiter and _group_fields(cls, f)]
        if delimiter and delimiter in rest:
            head, tail = rest.split(delimiter, 1)
            if head in ENV_GROUPS_ELSEWHERE and tail in fields:  # e.g. KAFKAGEN_STACK__HOME, now HOME
                close = [tail]
            elif head in fields or head in ENV_GROUPS_ELSEWHERE:
                continue
            else:
                close = difflib.get_close_matches(head, fields, n=1)
        elif delimiter and (group := _misjoined(cls, groups, rest)):
            close = [group + delimiter + rest.removeprefix(group + "_")]  # one _ where __ was meant
        else:
            close = difflib.get_close_matches(rest, fields, n=1, cutoff=0.8)
            if delimiter and not close:
                continue  # not a setting's name: another tool's variable
        hint = f"did you mean {prefix}{close[0].upper()}?" if close else f"{prefix}* are: {', '.join(fields)}"
        lines.append(f"  {name}: no such setting, {hint} (unset it)")
    return lines


def settings_to_env(settings: BaseSettings, prefix: str = ENV_PREFIX) -> dict[str, str]:
    """The environment variables that reproduce ``settings`` in a child process.

    Nested groups become ``PREFIX_GROUP__FIELD``; lists and dicts are JSON; ``None`` is left
    out. Secrets are written in clear (the child needs them): pass the result only to
    ``subprocess`` environments, never to a log.
    """
    import json

    env: dict[str, str] = {}

    def walk(obj: BaseModel, path: list[str]) -> None:
        for name in type(obj).model_fields:
            value = getattr(obj, name)
            key = "__".join([*path, name]).upper()
            if isinstance(value, BaseModel):
                walk(value, [*path, name])
            elif isinstance(value, SecretStr):
                env[prefix + key] = value.get_secret_value()
            elif isinstance(value, (list, dict)):
                env[prefix + key] = json.dumps(value)
            elif isinstance(value, bool):
                env[prefix + key] = "true" if value else "false"
            elif value is not None:
                env[prefix + key] = str(value)

    walk(settings, [])
    return env


def aws_environment() -> dict[str, str]:
    """Environment variables every process that talks to S3 gets: ``AWS_EC2_METADATA_DISABLED``,
    so botocore never probes 169.254.169.254 for credentials (docs/local-stack.md)."""
    return {"AWS_EC2_METADATA_DISABLED": "true"}


os.environ.update(aws_environment())
