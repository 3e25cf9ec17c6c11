"""What ``kafkagen regenerate`` selects and re-publishes (launch/regenerate/select.py): pure."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from launch.regenerate.select import (
    PromptHead,
    ResultHead,
    Selector,
    Where,
    command_digest,
    merged_params,
    next_turn_prompt,
    parse_where,
    regenerated,
)
from streams.errors import ConfigError
from streams.inputs import sampled
from streams.records import CompletionRecord, GenerationParams, PromptMetadata, PromptRecord, Timings, Usage

RUN = "r"


def _prompt(record_id: str, attempt: int = 0, params: GenerationParams | None = None) -> PromptRecord:
    return PromptRecord(
        id=record_id,
        messages=[{"role": "user", "content": f"q {record_id}"}],
        params=params or GenerationParams(),
        metadata=PromptMetadata(source="t.jsonl", line=1),
        run_id=RUN,
        attempt=attempt,
    )


def _feed(selector: Selector, results: list[tuple[str, ResultHead]], prompts: list[PromptRecord]) -> None:
    for offset, (kind, head) in enumerate(results):
        selector.see_result(kind, head, 0, offset, f"{RUN}.{kind}s")
    for prompt in prompts:
        phead = PromptHead(prompt.id, prompt.attempt, prompt.run_id)
        selector.see_prompt(phead, 3, prompt if selector.wants_prompt(phead) else None)


def test_parse_where_reads_every_key_and_names_what_is_wrong(tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("# the ones to redo\na\n\n b \n")
    where = parse_where(["quality=reasoning_ate_budget,degenerate", "finish_reason=length", f"ids={ids}"])
    assert where.classes == {"reasoning_ate_budget", "degenerate"} and where.finish_reasons == {"length"}
    assert where.ids == {"a", "b"} and where.describe()["ids"]["count"] == 2  # type: ignore[index]
    bad = {
        "quality=nope": "unknown quality class nope",
        "finish_reason=later": "unknown finish_reason later",
        "colour=red": "KEY=VALUE",
        "quality=": "KEY=VALUE",
        f"ids={tmp_path / 'missing.txt'}": "cannot be read",
    }
    for condition, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            parse_where([condition])
    with pytest.raises(ConfigError, match="at least one --where"):
        parse_where([])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="lists no id"):
        parse_where([f"ids={empty}"])


def test_the_latest_result_decides_and_pending_attempts_are_left_alone() -> None:
    where = parse_where(["quality=reasoning_ate_budget", "error_type=FatalRequestError"])
    selector = Selector(RUN, where)
    results = [
        (
            "completion",
            ResultHead("cut", quality=["reasoning_ate_budget", "empty_content"], finish_reason="length"),
        ),
        ("completion", ResultHead("fine", finish_reason="stop")),
        # cut at attempt 0, fixed at attempt 1: the latest result is fine
        ("completion", ResultHead("fixed", quality=["reasoning_ate_budget"])),
        ("completion", ResultHead("fixed", attempt=1, finish_reason="stop")),
        # an error beaten by a completion of the same attempt (a retry after a handover)
        ("error", ResultHead("retried", error_type="FatalRequestError")),
        ("completion", ResultHead("retried", finish_reason="stop")),
        ("error", ResultHead("failed", error_type="FatalRequestError")),
        # regenerated already: attempt 1 published, no result yet
        ("completion", ResultHead("waiting", quality=["reasoning_ate_budget"])),
        ("completion", ResultHead("other-run", run_id="x", quality=["reasoning_ate_budget"])),
    ]
    prompts = [_prompt(i) for i in ("cut", "fine", "fixed", "retried", "failed", "waiting", "new")]
    prompts += [_prompt("fixed", 1), _prompt("waiting", 1)]
    _feed(selector, results, prompts)
    selection = selector.selection()
    assert [p.id for _, p in selection.prompts] == ["cut", "failed"]
    assert all(partition == 3 for partition, _ in selection.prompts)
    assert selection.matched == 3 and selection.pending == 2 and selection.no_prompt == 0  # waiting, new
    assert selector.foreign == 1 and selector.results == 8
    assert dict(selection.attempts()) == {1: 2}


def test_a_matching_id_without_its_prompt_is_counted_not_published() -> None:
    selector = Selector(RUN, parse_where(["finish_reason=length"]))
    _feed(selector, [("completion", ResultHead("gone", finish_reason="length"))], [])
    selection = selector.selection()
    assert selection.prompts == [] and selection.no_prompt == 1


def test_a_second_regeneration_builds_on_the_latest_attempt_and_its_parameters() -> None:
    selector = Selector(RUN, parse_where(["quality=degenerate"]))
    first = GenerationParams(max_tokens=4096, chat_template_kwargs={"enable_thinking": True, "x": 1})
    results = [
        ("completion", ResultHead("a", quality=["reasoning_ate_budget"])),
        ("completion", ResultHead("a", attempt=1, quality=["repetition_loop"])),
    ]
    _feed(selector, results, [_prompt("a"), _prompt("a", 1, first)])
    [(_, latest)] = selector.selection().prompts
    again = regenerated(
        latest, latest.attempt + 1, GenerationParams(temperature=0.2, chat_template_kwargs={"x": 2})
    )
    assert again.attempt == 2 and again.messages == latest.messages and again.run_id == RUN
    assert again.params == GenerationParams(
        max_tokens=4096, temperature=0.2, chat_template_kwargs={"enable_thinking": True, "x": 2}
    )
    assert merged_params(GenerationParams(top_p=0.5), GenerationParams()) == GenerationParams(top_p=0.5)


def test_a_regenerated_sample_asks_for_a_new_seed_unless_the_overrides_set_one() -> None:
    [first, second] = sampled(_prompt("a"), 2)
    again = regenerated(second, 1, GenerationParams(max_tokens=8192))
    assert again.id == "a#1" and again.sample == 1 and again.params.max_tokens == 8192
    assert again.params.seed not in {first.params.seed, second.params.seed}
    assert regenerated(second, 1, GenerationParams(seed=7)).params.seed == 7


def test_the_command_digest_names_the_run_the_selection_and_the_overrides() -> None:
    where = parse_where(["quality=reasoning_ate_budget"])
    same = parse_where(["quality=reasoning_ate_budget"])
    big = GenerationParams(max_tokens=4096)
    assert command_digest(RUN, where, big) == command_digest(RUN, same, GenerationParams(max_tokens=4096))
    others = {
        command_digest("s", where, big),
        command_digest(RUN, parse_where(["quality=truncated"]), big),
        command_digest(RUN, where, GenerationParams(max_tokens=8192)),
        command_digest(RUN, where, GenerationParams()),
    }
    assert command_digest(RUN, where, big) not in others and len(others) == 4


def _answer(
    prompt: PromptRecord, content: str = "turn answer", finish_reason: str = "stop"
) -> CompletionRecord:
    return CompletionRecord(
        id=prompt.id,
        run_id=RUN,
        attempt=prompt.attempt,
        prompt=prompt,
        content=content,
        reasoning_content="thinking",
        finish_reason=finish_reason,
        usage=Usage(),
        timings=Timings(queued_s=0.0, latency_s=1.0, started_at=0.0, finished_at=1.0),
        server="http://s",
        model="m",
        params={},
    )


def _mt_bench(turns: list[str]) -> PromptRecord:
    return PromptRecord(
        id="81",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": turns[0]}],
        params=GenerationParams(max_tokens=1024),
        metadata=PromptMetadata(
            source="question.jsonl", line=1, extra={"turns": turns, "category": "writing"}
        ),
        run_id=RUN,
    )


def test_the_next_turn_follows_the_answer_and_stops_after_the_last_turn() -> None:
    first = _mt_bench(["write a poem", "now in French", "now shorter"])
    second = next_turn_prompt(_answer(first, "a poem"))
    assert second is not None and second.id == "81" and second.attempt == 0 and second.params == first.params
    assert second.messages == [
        *first.messages,
        {"role": "assistant", "content": "a poem"},
        {"role": "user", "content": "now in French"},
    ], "the answer without its reasoning, then the next user turn"
    assert second.metadata.extra == {**first.metadata.extra, "turn": 2}
    third = next_turn_prompt(_answer(msgspec.structs.replace(second, attempt=1), "un poème"))
    assert (
        third is not None
        and third.metadata.extra["turn"] == 3
        and third.messages[-1]["content"] == "now shorter"
    )
    assert next_turn_prompt(_answer(third)) is None, "no turn 4"
    assert next_turn_prompt(_answer(first, "cut", finish_reason="length")) is None, "a cut-off answer"
    assert next_turn_prompt(_answer(first, "  ")) is None, "an empty answer"
    assert next_turn_prompt(_answer(_prompt("plain"))) is None, "not a multi-turn prompt"


def test_next_turn_selects_each_id_once_per_turn() -> None:
    first = _mt_bench(["a", "b"])
    selector = Selector(RUN, Where(next_turn=True))
    answer = _answer(first)
    selector.see_result("completion", ResultHead("81"), 0, 0, "c", next_prompt=next_turn_prompt(answer))
    selector.see_prompt(PromptHead("81"), 5, None)
    [(partition, chosen)] = selector.selection().prompts
    assert partition == 5 and chosen.metadata.extra["turn"] == 2 and len(chosen.messages) == 4
    digest = command_digest(RUN, Where(next_turn=True), GenerationParams(), selector.selection())
    # published (attempt 1), not generated yet: left alone
    selector.see_prompt(PromptHead("81", attempt=1), 5, None)
    assert selector.selection().prompts == [] and selector.selection().pending == 1
    # generated: the last turn's answer has no next turn, and the command's digest moves on
    done = Selector(RUN, Where(next_turn=True))
    done.see_result("completion", ResultHead("81", attempt=1), 0, 1, "c", next_prompt=None)
    done.see_prompt(PromptHead("81", attempt=1), 5, None)
    assert done.selection().prompts == [] and done.selection().matched == 0
    assert command_digest(RUN, Where(next_turn=True), GenerationParams(), done.selection()) != digest
