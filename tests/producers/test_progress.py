"""Resume points: the progress key and transactional id of an input (their bytes must never change:
resume depends on them), the mapping options stored with them, and the checks on resume."""

from __future__ import annotations

import pytest

from producers.progress import changed_error, options_fingerprint, resume_note
from streams.errors import InputChangedError
from streams.inputs import FormatName, InputMapping, MappingOptions
from streams.records import ProgressRecord
from streams.runs import naming


def test_progress_key_and_transactional_id_are_stable() -> None:
    key = naming.progress_key("run-a.prompts", "run-a", "/data/prompts.jsonl")
    assert key == b'["run-a.prompts","run-a","/data/prompts.jsonl"]'
    assert key.startswith(naming.progress_key_prefix("run-a.prompts", "run-a"))
    assert not key.startswith(naming.progress_key_prefix("run-a.prompts", "run-ab"))
    # Values the producer derived before the split: a re-run must fence the same producer.
    assert (
        naming.transactional_id("run-a.prompts", "run-a", "/data/prompts.jsonl")
        == "kafkagen-prompts-1b4cf41cff5c25ce91e068d6"
    )
    assert naming.transactional_id("t", "r", "stdin:ab") == "kafkagen-prompts-acbeab24818074f07be81cfa"


def prior(options: MappingOptions, *, done: bool = False) -> ProgressRecord:
    return ProgressRecord(
        input="/data/a.jsonl",
        source="a.jsonl",
        topic="run-a.prompts",
        run_id="run-a",
        line=120,
        offset=4096,
        digest="0" * 64,
        published=118,
        done=done,
        options=options_fingerprint(options),
        at=0.0,
    )


def test_options_fingerprint_names_what_shapes_a_record() -> None:
    options = MappingOptions(
        format=FormatName.DATASET, prompt_field="question", keep_fields=("answer",), tags=("t",), run_id="x"
    )
    assert options_fingerprint(options) == {
        "format": "dataset",
        "prompt_field": "question",
        "id_field": None,
        "system": None,
        "keep_fields": ["answer"],
        "tags": ["t"],
    }


def test_resume_note_says_where_publishing_continues() -> None:
    options = MappingOptions()
    assert "continuing after line 120" in resume_note(prior(options), options, "a.jsonl")
    assert "published all its 120 lines" in resume_note(prior(options, done=True), options, "a.jsonl")


def test_resuming_with_other_mapping_options_is_refused() -> None:
    with pytest.raises(InputChangedError, match=r"system: None then, 'Be brief.' now") as caught:
        resume_note(prior(MappingOptions()), MappingOptions(system="Be brief."), "a.jsonl")
    assert caught.value.source == "a.jsonl"


def test_changed_error_names_the_input_and_the_published_lines() -> None:
    error = changed_error(prior(MappingOptions()), "a.jsonl", "it now has 3 lines")
    assert isinstance(error, InputChangedError)
    assert "lines 1-120: it now has 3 lines" in str(error)
    assert "--from-scratch" in str(error)


def test_the_last_turn_rule_is_stored_only_when_given_so_older_resume_points_still_match() -> None:
    older = prior(MappingOptions())
    assert "last_turn" not in older.options
    assert "continuing after line 120" in resume_note(older, MappingOptions(last_turn="auto"), "a.jsonl")
    with pytest.raises(InputChangedError, match=r"last_turn: None then, 'reference' now"):
        resume_note(older, MappingOptions(last_turn="reference"), "a.jsonl")
    assert options_fingerprint(MappingOptions(last_turn="keep"))["last_turn"] == "keep"
    note = resume_note(prior(MappingOptions()), MappingOptions(), "a.json", noun="record")
    assert "published records 1-120" in note and "continuing after record 120" in note


def test_the_last_turn_option_reaches_the_producer_command_line() -> None:
    assert InputMapping().argv() == []
    mapping = InputMapping(MappingOptions(format=FormatName.SHAREGPT, last_turn="keep"))
    assert mapping.argv() == ["--input-format", "sharegpt", "--last-turn", "keep"]
    assert mapping.options("r").last_turn == "keep"
