"""Which ``KAFKAGEN_*`` environment variables name no setting (:func:`unknown_environment`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final

from pydantic_settings import BaseSettings

__all__ = ["ENV_GROUPS_ELSEWHERE", "unknown_environment"]

ENV_GROUPS_ELSEWHERE: Final[frozenset[str]] = frozenset({"stack"})
"""``KAFKAGEN_<GROUP>__`` groups read by another owner: ``stack``, the local stack's
(:class:`launch.stack.settings.StackSettings`)."""


def unknown_environment(cls: type[BaseSettings], environ: Mapping[str, str]) -> list[str]:
    """One line per variable of ``environ`` under ``cls``'s prefix that names no setting of it.

    pydantic-settings refuses an unknown field of a known group itself but ignores an unknown
    top-level name, so a misspelt ``KAFKAGEN_GENRATION__MAX_TOKENS`` or ``KAFKAGEN_RUNID`` would
    silently fall back to a default. Refused here: a group that is neither ``cls``'s nor in
    :data:`ENV_GROUPS_ELSEWHERE`; a top-level name close to one of ``cls``'s (the prefix also
    carries variables that are no settings, e.g. ``KAFKAGEN_AUDIT_TRACE``); for a class without
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
        if delimiter and delimiter in rest:
            head = rest.split(delimiter)[0]
            if head in fields or head in ENV_GROUPS_ELSEWHERE:
                continue
            close = difflib.get_close_matches(head, fields, n=1)
        else:
            close = difflib.get_close_matches(rest, fields, n=1, cutoff=0.8)
            if delimiter and not close:
                continue  # not a setting's name: another tool's variable
        hint = f"did you mean {prefix}{close[0].upper()}?" if close else f"{prefix}* are: {', '.join(fields)}"
        lines.append(f"  {name}: no such setting, {hint} (unset it)")
    return lines
