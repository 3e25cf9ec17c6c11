"""Quality flags on realistic completions: the real degenerate patterns, loops, clean answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumers.quality.flags import QualityConfig, quality_flags, repeated_ngram_ratio, tokenize
from streams.quality import DEGENERATE_FLAGS, QualityFlag, degenerate

PROSE = (
    "The Kafka log is an append-only sequence of records, split into partitions so that "
    "several consumers can share the work. Each record keeps its position, the offset, for as "
    "long as the topic retains it, which is what makes a consumer group resumable: after a "
    "crash, a new member reads the committed offset of every partition it is given and starts "
    "from there. The price of this simplicity is that a commit covers everything below it. A "
    "consumer that finishes records out of order must therefore hold its commit back until the "
    "oldest unfinished record is done, or it will silently skip work when it restarts. In "
    "practice the gap stays small, because requests to one inference server take roughly the "
    "same time, but a single slow generation can hold a whole partition back for minutes."
)

CODE = '''def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals."""
    result: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result


if __name__ == "__main__":
    print(merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)]))
'''

CHINESE_PROSE = (
    "消费者从分区中读取记录后，把提示发送给推理服务器，并在结果写回之后才提交偏移量。"
    "这样即使进程被强制终止，重新启动的成员也会从最后一次提交的位置继续处理，"
    "最坏的情况只是少量请求被重复生成，而不会丢失任何一条记录。为了充分利用显卡，"
    "客户端需要同时保持足够多的请求在服务器上运行，但排队的请求过多只会增加延迟。"
)


def _long_reasoning() -> str:
    """A long, healthy thinking trace: ~3,000 tokens of arithmetic that never repeats itself."""
    lines = [
        "Okay, the user wants every composite number between 1000 and 1300 with a factorisation. "
        "Let me go through them one at a time and write each as a product of two factors."
    ]
    for n in range(1000, 1300):
        p = next(d for d in range(2, n) if n % d == 0 or d * d > n)
        if n % p == 0:
            lines.append(f"Check {n}: {n} = {p} × {n // p}, so it is composite.")
        else:
            lines.append(f"Check {n}: no divisor up to {p - 1}, so {n} is prime.")
    return " ".join(lines)


def _flags(**overrides: Any) -> list[str]:
    kwargs: dict[str, Any] = {
        "content": PROSE,
        "reasoning_content": "The user asks about Kafka offsets. I should explain commits.",
        "finish_reason": "stop",
        "tool_calls": None,
        "tools_offered": False,
        "thinking_requested": True,
    }
    kwargs.update(overrides)
    return quality_flags(**kwargs)


def _call(name: Any = "get_weather", arguments: Any = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}


# -- the incident and the plain cases ------------------------------------------------------------


def test_budget_eaten_by_reasoning_is_the_degenerate_signature() -> None:
    reasoning = _long_reasoning()
    assert len(tokenize(reasoning)) > 2500
    flags = _flags(content="", reasoning_content=reasoning, finish_reason="length")
    assert flags == ["empty_content", "reasoning_ate_budget", "truncated"]
    assert degenerate(flags)


def test_clean_completion_has_no_flags() -> None:
    assert _flags() == []
    assert _flags(reasoning_content=_long_reasoning()) == []
    assert not degenerate([])


def test_truncated_answer_is_flagged_but_usable() -> None:
    flags = _flags(finish_reason="length")
    assert flags == ["truncated"]
    assert not degenerate(flags)


def test_unclosed_think_block_in_content_means_the_budget_was_eaten() -> None:
    """A server without --reasoning-parser leaves the thought in content."""
    content = "<think>\nThe user wants a haiku about autumn. Let me count syllables"
    flags = _flags(content=content, reasoning_content=None, finish_reason="length", thinking_requested=False)
    assert flags == ["reasoning_ate_budget", "truncated"]
    assert degenerate(flags)
    closed = "<think>short thought</think>The answer is 4."
    assert _flags(content=closed, finish_reason="length", thinking_requested=False) == ["truncated"]


@pytest.mark.parametrize("reasoning", [None, "", "  \n"])
def test_thinking_requested_but_missing(reasoning: str | None) -> None:
    flags = _flags(reasoning_content=reasoning)
    assert flags == ["thinking_missing"]
    assert not degenerate(flags)
    assert _flags(reasoning_content=reasoning, thinking_requested=False) == []


@pytest.mark.parametrize("content", ["", " ", "\n\n"])
def test_empty_content_with_stop(content: str) -> None:
    flags = _flags(content=content)
    assert flags == ["empty_content"]
    assert degenerate(flags)


# -- repetition -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(PROSE, id="prose"),
        pytest.param(PROSE + "\n\n" + CODE, id="prose-and-code"),
        pytest.param(CHINESE_PROSE, id="chinese-prose"),
        pytest.param(_long_reasoning(), id="long-templated-reasoning"),
        pytest.param(
            "| model | slots | queue |\n|---|---|---|\n"
            + "\n".join(f"| server-{i} | {16 + i} | {i % 3} |" for i in range(30)),
            id="markdown-table",
        ),
        pytest.param("Yes.", id="short"),
        pytest.param("No no no no no no no no no no.", id="short-repetitive"),
    ],
)
def test_normal_text_is_not_a_loop(text: str) -> None:
    assert "repetition_loop" not in _flags(content=text)
    assert "repetition_loop" not in _flags(reasoning_content=text)


def _loop_text(name: str) -> str:
    if name == "the-the-the":
        return "The answer is " + "the " * 400
    if name == "repeated-sentence":
        return PROSE[:200] + " " + "Wait, I need to verify this once more before answering. " * 40
    if name == "chinese-loop":
        return CHINESE_PROSE + "我们需要再检查一遍这个结果。" * 40
    if name == "tail-loop":
        return _long_reasoning() + " " + "So the final answer is 1297, but let me recheck that. " * 60
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["the-the-the", "repeated-sentence", "chinese-loop", "tail-loop"])
def test_loops_are_flagged_in_content_and_in_reasoning(name: str) -> None:
    text = _loop_text(name)
    in_content = _flags(content=text)
    assert in_content == ["repetition_loop"]
    assert degenerate(in_content)
    assert _flags(reasoning_content=text) == ["repetition_loop"]
    looping_budget = _flags(content="", reasoning_content=text, finish_reason="length")
    assert looping_budget == ["empty_content", "reasoning_ate_budget", "truncated", "repetition_loop"]


def test_tail_window_catches_a_loop_after_a_long_healthy_start() -> None:
    text = _loop_text("tail-loop")
    assert repeated_ngram_ratio(text) < QualityConfig().threshold, "the whole text alone would pass"
    assert "repetition_loop" in _flags(content=text)


def test_repeated_ngram_ratio_values() -> None:
    assert repeated_ngram_ratio("") == 0.0
    assert repeated_ngram_ratio("one two three", n=8) == 0.0
    assert repeated_ngram_ratio("a b a b", n=2) == pytest.approx(1 / 3)  # ab, ba, ab
    assert repeated_ngram_ratio("the " * 100, n=8) == pytest.approx(1 - 1 / 93)
    assert repeated_ngram_ratio("The THE the", n=1) == pytest.approx(2 / 3), "case-folded"
    assert repeated_ngram_ratio(PROSE) == 0.0
    assert 0.85 < repeated_ngram_ratio(_loop_text("repeated-sentence")) < 1.0
    with pytest.raises(ValueError, match="n must be >= 1"):
        repeated_ngram_ratio("x", n=0)


def test_tokenize_splits_cjk_into_characters() -> None:
    assert tokenize("Hello, 世界 ok") == ["hello,", "世", "界", "ok"]


def test_config_thresholds_are_honoured() -> None:
    text = "Wait, I need to verify this once more before answering. " * 6  # 60 tokens
    assert "repetition_loop" not in _flags(content=text)  # below min_tokens
    strict = QualityConfig(min_tokens=16)
    assert "repetition_loop" in _flags(content=text, config=strict)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ngram": 0}, "ngram"),
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"min_tokens": 4}, "min_tokens"),
        ({"tail_tokens": 32}, "tail_tokens"),
    ],
)
def test_invalid_config_raises(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QualityConfig(**kwargs)  # type: ignore[arg-type]


# -- tool calls -----------------------------------------------------------------------------------


def test_valid_tool_call_with_empty_content_is_clean() -> None:
    flags = _flags(content="", finish_reason="tool_calls", tool_calls=[_call()], tools_offered=True)
    assert flags == []


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(_call(name=None), id="no-name"),
        pytest.param(_call(name=""), id="empty-name"),
        pytest.param(_call(arguments='{"city": "Paris"'), id="invalid-json"),
        pytest.param(_call(arguments='["Paris"]'), id="json-array"),
        pytest.param(_call(arguments="null"), id="json-null"),
        pytest.param(_call(arguments={"city": "Paris"}), id="dict-not-string"),
        pytest.param({"id": "call_0", "type": "function"}, id="no-function"),
    ],
)
def test_malformed_tool_calls(call: dict[str, Any]) -> None:
    flags = _flags(content="", finish_reason="tool_calls", tool_calls=[_call(), call], tools_offered=True)
    assert flags == ["malformed_tool_call"]
    assert degenerate(flags)


def test_unparsed_tool_call_tag_in_content() -> None:
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>'
    assert _flags(content=raw, tools_offered=True) == ["malformed_tool_call"]
    assert _flags(content=raw, tools_offered=False) == []


def test_tool_calls_are_only_checked_when_tools_were_offered() -> None:
    assert _flags(tool_calls=[_call(name=None)], tools_offered=False) == []


# -- flag names -----------------------------------------------------------------------------------


def test_flag_names_are_stable() -> None:
    assert [flag.value for flag in QualityFlag] == [
        "empty_content",
        "reasoning_ate_budget",
        "thinking_missing",
        "truncated",
        "repetition_loop",
        "malformed_tool_call",
        "template_leak",
        "echoed_prompt",
        "invalid_json",
        "schema_mismatch",
        "pattern_mismatch",
    ]
    assert {
        "empty_content",
        "reasoning_ate_budget",
        "repetition_loop",
        "malformed_tool_call",
        "template_leak",
        "echoed_prompt",
        "invalid_json",
        "schema_mismatch",
        "pattern_mismatch",
    } == DEGENERATE_FLAGS
    flags = _flags(content="", reasoning_content=None, finish_reason="length")
    assert all(type(flag) is str for flag in flags), "plain strings for the wire record"
    assert json.loads(json.dumps(flags)) == flags


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], False),
        (["truncated"], False),
        (["thinking_missing", "truncated"], False),
        (["some_future_flag"], False),
        (["truncated", "repetition_loop"], True),
        (["malformed_tool_call"], True),
        (("empty_content",), True),
    ],
)
def test_degenerate(flags: list[str], expected: bool) -> None:
    assert degenerate(flags) is expected


def test_leaked_chat_template_tokens_are_degenerate() -> None:
    # What Gemma-3-270M answered through llama.cpp's ChatML fallback template.
    content = "What is 3+2<|im_end|>?\n<|im_start|>12+3<|im_end|>\n<|im_start|>8+4"
    flags = _flags(content=content, finish_reason="length", thinking_requested=False)
    assert "template_leak" in flags
    assert degenerate(flags)
    assert "template_leak" not in _flags(content="The answer is 5.")


def test_an_answer_that_parrots_the_question_is_degenerate() -> None:
    question = "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning."
    echoed = _flags(
        content="Janet's ducks lay 16 eggs per day.  She eats three for breakfast every morning. And",
        finish_reason="length",
        prompt_text=question,
    )
    assert "echoed_prompt" in echoed
    assert degenerate(echoed)
    answer = _flags(content="She has 16 - 3 = 13 eggs left, so she sells 13 eggs.", prompt_text=question)
    assert "echoed_prompt" not in answer
    assert _flags(content="2+2 is 4", prompt_text="2+2?") == []
