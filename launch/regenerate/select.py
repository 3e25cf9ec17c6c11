"""Which prompts of a run ``kafkagen regenerate`` re-publishes, and as what: pure, no I/O.

An id's *result* is the record the export would keep for it (:func:`sinks.export.sources.rank`);
``--where`` conditions (:func:`parse_where`: ``quality``, ``finish_reason``, ``error_type``,
``ids``) select the ids whose result matches, ``--next-turn`` the multi-turn prompts with a next
turn (:func:`next_turn_prompt`). An id whose latest attempt has no result yet is pending, never
selected; a selected id is re-published as its latest attempt + 1 with the overrides merged over
its ``params``. The rules: docs/runs.md, "Regenerating part of a run".
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, get_args

import msgspec

from sinks.export.sources import Rank, attempt_of, rank
from streams.errors import ConfigError
from streams.inputs import reseeded
from streams.quality import QUALITY_CLASSES, result_classes
from streams.records import CompletionRecord, FinishReason, GenerationParams, PromptRecord

__all__ = [
    "WHERE_KEYS",
    "PromptHead",
    "ResultHead",
    "Selection",
    "Selector",
    "Where",
    "command_digest",
    "merged_params",
    "next_turn_prompt",
    "parse_where",
    "regenerated",
]

WHERE_KEYS: Final = ("quality", "finish_reason", "error_type", "ids")


class ResultHead(msgspec.Struct):
    """The fields of a completion or dead letter (``streams.records``) a selection reads."""

    id: str
    attempt: int = 0
    run_id: str | None = None
    quality: list[str] = []
    finish_reason: str | None = None
    error_type: str | None = None


class PromptHead(msgspec.Struct):
    """The fields of a prompt record a selection reads first (the whole prompt is decoded only
    for a selected id)."""

    id: str
    attempt: int = 0
    run_id: str | None = None


@dataclass(frozen=True)
class Where:
    """The ``--where`` conditions of one regeneration (docs/runs.md); empty sets match nothing."""

    classes: frozenset[str] = frozenset()
    finish_reasons: frozenset[str] = frozenset()
    error_types: frozenset[str] = frozenset()
    ids: frozenset[str] = frozenset()
    ids_file: str | None = None
    next_turn: bool = False
    """select the multi-turn prompts with a next turn (docs/runs.md, ``--next-turn``) instead."""

    def matches(self, kind: str, head: ResultHead) -> bool:
        """Whether the result ``head`` (``kind`` ``completion`` or ``error``) is selected."""
        if head.id in self.ids:
            return True
        if kind == "completion":
            if head.finish_reason in self.finish_reasons:
                return True
            return bool(self.classes.intersection(result_classes(head.quality)))
        return head.error_type in self.error_types or "error" in self.classes

    def describe(self) -> dict[str, object]:
        """The conditions as the regenerate record keeps them (``ids``: the file, count and a
        digest of the sorted ids)."""
        out: dict[str, object] = {"next_turn": True} if self.next_turn else {}
        if self.classes:
            out["quality"] = sorted(self.classes)
        if self.finish_reasons:
            out["finish_reason"] = sorted(self.finish_reasons)
        if self.error_types:
            out["error_type"] = sorted(self.error_types)
        if self.ids_file is not None:
            digest = hashlib.blake2b("\n".join(sorted(self.ids)).encode(), digest_size=12).hexdigest()
            out["ids"] = {"file": self.ids_file, "count": len(self.ids), "digest": digest}
        return out


def parse_where(conditions: list[str] | tuple[str, ...]) -> Where:
    """The :class:`Where` of ``--where KEY=VALUE[,VALUE...]`` conditions (docs/runs.md).

    Raises:
        ConfigError: no condition, a malformed one, an unknown key, class or finish reason, an ids
            file that cannot be read or lists no id; the message names the condition and the fix.
    """
    if not conditions:
        raise ConfigError(
            "regenerate needs at least one --where (quality=CLASS, finish_reason=REASON, error_type=TYPE "
            "or ids=FILE), or --next-turn"
        )
    classes: set[str] = set()
    reasons: set[str] = set()
    errors: set[str] = set()
    ids: set[str] = set()
    ids_file: str | None = None
    for condition in conditions:
        key, sep, value = condition.partition("=")
        key = key.strip()
        values = [v.strip() for v in value.split(",") if v.strip()]
        if not sep or key not in WHERE_KEYS or not values:
            raise ConfigError(
                f"--where {condition!r}: expected KEY=VALUE[,VALUE...] with KEY one of "
                f"{', '.join(WHERE_KEYS)}"
            )
        if key == "quality":
            classes.update(_known(condition, "quality class", values, QUALITY_CLASSES))
        elif key == "finish_reason":
            reasons.update(_known(condition, "finish_reason", values, get_args(FinishReason)))
        elif key == "error_type":
            errors.update(values)
        else:
            if ids_file is not None or len(values) != 1:
                raise ConfigError(f"--where {condition!r}: give one ids=FILE")
            ids_file = values[0]
            ids.update(_read_ids(Path(ids_file)))
    return Where(frozenset(classes), frozenset(reasons), frozenset(errors), frozenset(ids), ids_file)


def _known(condition: str, what: str, values: list[str], known: tuple[str, ...]) -> list[str]:
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"--where {condition!r}: unknown {what} {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return values


def _read_ids(path: Path) -> set[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--where ids={path}: cannot be read: {exc}") from None
    ids = {s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")}
    if not ids:
        raise ConfigError(f"--where ids={path}: lists no id (one id per line)")
    return ids


def merged_params(params: GenerationParams, overrides: GenerationParams) -> GenerationParams:
    """``params`` with every field ``overrides`` sets replaced (``chat_template_kwargs`` merged
    key by key)."""
    fields = params.as_request_fields()
    new = overrides.as_request_fields()
    if "chat_template_kwargs" in new:
        new["chat_template_kwargs"] = {
            **(fields.get("chat_template_kwargs") or {}),
            **new["chat_template_kwargs"],
        }
    return GenerationParams(**{**fields, **new})


def regenerated(prompt: PromptRecord, attempt: int, overrides: GenerationParams) -> PromptRecord:
    """``prompt`` as attempt ``attempt`` with ``overrides`` merged over its parameters; a sample
    (``--samples``) with a seed of its own unless the overrides set one (:func:`streams.inputs.reseeded`)."""
    base = reseeded(prompt) if overrides.seed is None else prompt
    return msgspec.structs.replace(base, attempt=attempt, params=merged_params(base.params, overrides))


def next_turn_prompt(completion: CompletionRecord) -> PromptRecord | None:
    """The prompt of the turn after ``completion``'s, or None when its prompt has no next turn
    (``metadata.extra["turns"]``, the MT-Bench format's, :mod:`streams.inputs.formats`) or its answer
    cannot be continued (``finish_reason`` is not ``stop``, or the answer is empty). Turn k is the
    number of user messages; turn k + 1's messages are turn k's, the answer (``content``, without
    the reasoning: a thinking model's template drops earlier reasoning too), then the user's turn
    k + 1. Its ``metadata.extra["turn"]`` is k + 1; the id, attempt and params stay."""
    prompt = completion.prompt
    turns = prompt.metadata.extra.get("turns")
    k = sum(1 for m in prompt.messages if m.get("role") == "user")
    if not isinstance(turns, list) or k >= len(turns) or not isinstance(turns[k], str):
        return None
    if completion.finish_reason != "stop" or not completion.content.strip():
        return None
    messages = [
        *prompt.messages,
        {"role": "assistant", "content": completion.content},
        {"role": "user", "content": turns[k]},
    ]
    metadata = msgspec.structs.replace(prompt.metadata, extra={**prompt.metadata.extra, "turn": k + 1})
    return msgspec.structs.replace(prompt, messages=messages, metadata=metadata)


def command_digest(
    run_id: str, where: Where, overrides: GenerationParams, selection: Selection | None = None
) -> str:
    """What identifies one regeneration (hex BLAKE2b-96): the run, the command's conditions and
    overrides, and its ``selection`` (each id and the attempt it builds on). The same command run
    again before anything changed has the same digest and publishes nothing; run later, on a run
    still generating, it selects what matches then, so the ids whose results matched since are
    re-published (its earlier ids are pending until their new attempts have results). A
    ``--next-turn`` command builds the turn after once its turns are generated."""
    chosen = [(p.id, p.attempt) for _, p in selection.prompts] if selection is not None else None
    data = msgspec.json.Encoder(order="sorted").encode(
        [run_id, where.describe(), overrides.as_request_fields(), chosen]
    )
    return hashlib.blake2b(data, digest_size=12).hexdigest()


@dataclass
class Selector:
    """Feeds on a run's results, then its prompts, and says what to re-publish (docs/runs.md).

    Memory: about 300 bytes per id (300 MB for a million prompts), plus the selected ids' prompts.
    """

    run_id: str
    where: Where
    results: int = 0
    """results read (completions and dead letters of the run)."""
    foreign: int = 0
    """results of another run (never selected)."""
    _best: dict[str, tuple[Rank, bool]] = field(default_factory=dict)
    _latest_prompt: dict[str, tuple[int, int, PromptRecord | None]] = field(default_factory=dict)
    _next: dict[str, PromptRecord] = field(default_factory=dict)

    def see_result(
        self,
        kind: str,
        head: ResultHead,
        partition: int,
        offset: int,
        topic: str,
        *,
        next_prompt: PromptRecord | None = None,
    ) -> None:
        """One completion (``kind`` ``completion``) or dead letter (``error``) of the run; with
        ``where.next_turn``, ``next_prompt`` is the prompt of its next turn, if it has one
        (:func:`next_turn_prompt`)."""
        if head.run_id is not None and head.run_id != self.run_id:
            self.foreign += 1
            return
        self.results += 1
        this = rank(kind, head.attempt, offset, topic, partition)
        best = self._best.get(head.id)
        if best is None or this < best[0]:
            if self.where.next_turn:
                self._best[head.id] = (this, next_prompt is not None)
                if next_prompt is None:
                    self._next.pop(head.id, None)
                else:
                    self._next[head.id] = next_prompt
            else:
                self._best[head.id] = (this, self.where.matches(kind, head))

    def wants_prompt(self, head: PromptHead) -> bool:
        """Whether the prompt record ``head`` must be decoded whole (its id's result matched)."""
        best = self._best.get(head.id)
        return best is not None and best[1] and not self.where.next_turn

    def see_prompt(self, head: PromptHead, partition: int, prompt: PromptRecord | None) -> None:
        """One prompt record of the run's prompts topic (``prompt``: decoded when
        :meth:`wants_prompt`); the highest attempt of an id wins."""
        seen = self._latest_prompt.get(head.id)
        if seen is None or head.attempt > seen[0]:
            self._latest_prompt[head.id] = (head.attempt, partition, prompt)

    def selection(self) -> Selection:
        """What to re-publish, and what was left aside."""
        chosen: list[tuple[int, PromptRecord]] = []
        pending = no_prompt = 0
        for record_id, (best, matched) in self._best.items():
            if not matched:
                continue
            attempt, partition, prompt = self._latest_prompt.get(record_id, (0, 0, None))
            if record_id in self._next and record_id in self._latest_prompt:
                prompt = self._next[record_id]
            if prompt is None:
                no_prompt += 1
                continue
            if attempt != attempt_of(best):
                pending += 1  # the latest attempt has no result yet
                continue
            chosen.append((partition, prompt))
        pending += sum(1 for i in self._latest_prompt if i not in self._best)
        chosen.sort(key=lambda item: item[1].id)
        return Selection(
            chosen,
            unknown_ids=len(self.where.ids.difference(self._best)),
            matched=sum(1 for _, m in self._best.values() if m),
            pending=pending,
            no_prompt=no_prompt,
        )


@dataclass(frozen=True)
class Selection:
    """The prompts to re-publish as (prompts-topic partition, latest prompt) pairs, sorted by id;
    ``matched``: results matching the conditions; ``pending``: ids whose latest attempt has no
    result yet (left alone); ``no_prompt``: matched ids whose prompt is not on the prompts topic;
    ``unknown_ids``: listed ids with no result."""

    prompts: list[tuple[int, PromptRecord]]
    matched: int
    pending: int
    no_prompt: int
    unknown_ids: int = 0
    """ids of the ``ids=FILE`` list with no result in the run (mistyped, or not generated yet)."""

    def attempts(self) -> Counter[int]:
        """New attempt number → prompts re-published as it."""
        return Counter(p.attempt + 1 for _, p in self.prompts)
