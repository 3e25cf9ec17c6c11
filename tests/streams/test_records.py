"""Record helpers that are pure: fitting a dead letter into a Kafka record."""

from __future__ import annotations

import pytest

from streams.records import ErrorRecord, PromptRecord, SourceOffset, decode, encode, fit_error
from tests.helpers import make_prompt

_SOURCE = SourceOffset(topic="prompts", partition=3, offset=17)


def _error(**fields: object) -> ErrorRecord:
    base: dict[str, object] = {
        "id": "p-1",
        "stage": "generate",
        "error_type": "FatalRequestError",
        "message": "context length exceeded",
        "source": _SOURCE,
    }
    return ErrorRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_a_record_that_fits_is_unchanged() -> None:
    error = _error(prompt=make_prompt(1))
    assert fit_error(error, 1_000_000) is error


def test_raw_bytes_that_grow_through_replacement_characters_are_cut_with_the_reason() -> None:
    raw = (b"\xff" * 600_000).decode("utf-8", "replace")  # 1.8 MB once encoded
    fitted = fit_error(_error(raw=raw, error_type="RecordDecodeError"), 1_048_576)
    value = encode(fitted)
    assert len(value) <= 1_048_576
    assert fitted.raw is not None and raw.startswith(fitted.raw) and fitted.raw
    assert "raw input cut from 600000" in fitted.message
    assert decode(value, ErrorRecord).source == _SOURCE


def test_a_prompt_too_large_to_embed_is_left_out_and_the_source_kept() -> None:
    prompt = make_prompt(1, content="\x01" * 300_000)  # escaped as \u0001: 6 bytes each
    fitted = fit_error(_error(prompt=prompt, message="m" * 5000), 1_048_576)
    assert len(encode(fitted)) <= 1_048_576
    assert fitted.prompt is None
    assert "prompt left out" in fitted.message and fitted.message.startswith("mmm")
    assert fitted.source == _SOURCE and fitted.id == "p-1"


def test_a_huge_message_is_cut_last() -> None:
    fitted = fit_error(_error(message="\x02" * 2_000_000), 1_048_576)
    assert len(encode(fitted)) <= 1_048_576
    assert fitted.message.endswith("message cut]")


def test_a_budget_too_small_for_any_record_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        fit_error(_error(), 100)


def test_fitted_records_decode_as_error_records() -> None:
    prompt = make_prompt(2, content="é" * 400_000)
    fitted = fit_error(_error(prompt=prompt), 524_288)
    assert isinstance(decode(encode(fitted), ErrorRecord), ErrorRecord)
    assert not isinstance(fitted.prompt, PromptRecord)


def test_a_huge_id_from_a_poison_key_is_cut_keeping_the_source() -> None:
    """The id of an undecodable record is its key: 1.2 MB of replacement characters here."""
    poison_id = (b"\xff" * 400_000).decode("utf-8", "replace")
    fitted = fit_error(_error(id=poison_id, raw="x"), 1_048_576)
    assert len(fitted.id) < 300 and fitted.id.endswith("prompts+3+17")
    assert "id cut from 400000 characters" in fitted.message
    assert len(encode(fitted)) <= 1_048_576
