"""``--samples N``: a prompt as N records with their own ids and seeds."""

from __future__ import annotations

import pytest

from streams.errors import ConfigError
from streams.inputs import MAX_SAMPLES, InputMapping, MappingOptions, parse_line, reseeded, sampled
from streams.records import PromptRecord, decode, encode

pytestmark = pytest.mark.pure


def _record(row: bytes = b'{"id": "q", "prompt": "2 + 2?"}') -> PromptRecord:
    return parse_line(row, source="r.jsonl", line=1, options=MappingOptions())


def test_one_sample_is_the_record_itself() -> None:
    record = _record()
    assert sampled(record, 1) == [record] and record.sample is None and record.prompt_id == "q"


def test_each_sample_has_its_id_its_k_and_its_own_seed_and_round_trips() -> None:
    records = sampled(_record(), 4)
    assert [r.id for r in records] == ["q#0", "q#1", "q#2", "q#3"]
    assert [r.sample for r in records] == [0, 1, 2, 3]
    assert {r.prompt_id for r in records} == {"q"}
    assert len({r.params.seed for r in records}) == 4
    assert sampled(_record(), 4) == records, "the same seeds every time: a re-generation repeats a sample"
    assert [decode(encode(r), PromptRecord) for r in records] == records
    assert {r.messages[0]["content"] for r in records} == {"2 + 2?"}


def test_a_row_seed_is_the_first_sample_seed() -> None:
    records = sampled(_record(b'{"id": "q", "prompt": "x", "seed": 41}'), 3)
    assert [r.params.seed for r in records] == [41, 42, 43]


def test_an_id_holding_the_separator_still_gives_back_its_prompt_id() -> None:
    assert {r.prompt_id for r in sampled(_record(b'{"id": "a#1", "prompt": "x"}'), 2)} == {"a#1"}


@pytest.mark.parametrize("samples", [0, -1, MAX_SAMPLES + 1])
def test_a_sample_count_out_of_range_is_refused(samples: int) -> None:
    with pytest.raises(ConfigError, match=f"--samples must be 1 to {MAX_SAMPLES}"):
        MappingOptions(samples=samples)


def test_samples_travel_to_the_producer_command_line() -> None:
    assert InputMapping(MappingOptions(samples=3)).argv() == ["--samples", "3"]
    assert InputMapping(MappingOptions()).argv() == []


def test_a_regenerated_sample_gets_a_seed_of_no_attempt_or_sibling_before() -> None:
    siblings = sampled(_record(), 3)
    seen = {r.params.seed for r in siblings}
    again = siblings[1]
    for _ in range(3):
        again = reseeded(again)
        assert again.params.seed not in seen and again.id == "q#1"
        seen.add(again.params.seed)
    plain = _record()
    assert reseeded(plain) is plain
