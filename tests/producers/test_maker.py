"""Input lines → records ready to send: encoding, the size limit, the partition, rejections."""

from __future__ import annotations

import json

from producers.partitioning import input_salt, partition_for
from producers.reading.limits import RECORD_OVERHEAD_BYTES, record_size
from producers.reading.maker import Made, RecordMaker, Rejected
from streams.config import KeyBy
from streams.inputs import MappingOptions, parse_line
from streams.records import PromptRecord, decode, key_of

OPTIONS = MappingOptions(run_id="run-1")


def maker(*, record_limit: int = 1 << 20, key_by: KeyBy = "balanced") -> RecordMaker:
    return RecordMaker("data/a.jsonl", OPTIONS, partitions=7, key_by=key_by, record_limit=record_limit)


def good(made: Made | list[Made] | Rejected) -> Made:
    assert not isinstance(made, (Rejected, list)), made
    return made


def chat(record_id: str | None = "q-1", text: str = "What is 2 + 2?") -> bytes:
    row: dict[str, object] = {"messages": [{"role": "user", "content": text}]}
    if record_id is not None:
        row["id"] = record_id
    return json.dumps(row).encode() + b"\n"


def test_a_good_line_becomes_id_key_value_and_partition() -> None:
    make = maker()
    raw = chat()
    record_id, key, value, partition = good(make(raw, 3))
    expected = parse_line(raw, source="data/a.jsonl", line=3, options=OPTIONS)
    assert record_id == "q-1"
    assert key == key_of("q-1")
    assert decode(value, PromptRecord) == expected
    salt = input_salt("data/a.jsonl")
    assert partition == partition_for(expected, key, 7, "balanced", line=3, salt=salt)


def test_the_salt_set_by_the_reader_moves_the_round_robin() -> None:
    make = maker()
    make.salt = 0
    assert [good(make(chat(f"q-{n}"), n))[3] for n in range(1, 9)] == [0, 1, 2, 3, 4, 5, 6, 0]
    make.salt = 5
    assert good(make(chat(), 1))[3] == 5


def test_a_bad_row_is_rejected_with_the_id_it_names() -> None:
    made = maker()(b'{"id": "q-9", "messages": []}\n', 4)
    assert isinstance(made, Rejected)
    assert made.record_id == "q-9"
    assert "messages" in made.reason
    invalid = maker()(b"{not json\n", 5)
    assert isinstance(invalid, Rejected) and invalid.record_id is None
    assert invalid.reason.startswith("invalid JSON")


def test_a_record_over_the_topic_limit_is_rejected_with_its_size() -> None:
    raw = chat(text="x" * 2000)
    made = good(maker()(raw, 1))
    size = record_size(made[1], made[2])
    assert size == len(made[1]) + len(made[2]) + RECORD_OVERHEAD_BYTES
    assert not isinstance(maker(record_limit=size)(raw, 1), Rejected)
    over = maker(record_limit=size - 1)(raw, 1)
    assert isinstance(over, Rejected)
    assert over.record_id == "q-1"
    assert over.reason == (
        f"record is {size} bytes encoded, over the prompts topic's limit of {size - 1} bytes "
        "(max.message.bytes)"
    )
