"""``--samples N``: each prompt as N records, one per completion wanted (docs/inputs.md, Samples).

Sample ``k`` (0-based) of prompt ``x`` is its own record ``x#k``, so every stage that works per
id (dedupe, the export's missing ids, regenerate, the gate) works per sample. Each gets its own
``seed``: the row's seed (or a stable hash of the prompt id) plus ``k``, so the samples differ and a
re-generation asks for another (:func:`reseeded`), never a sibling's.
"""

from __future__ import annotations

import zlib
from typing import Final

import msgspec

from streams.records import PromptRecord

__all__ = ["MAX_SAMPLES", "reseeded", "sample_id", "sampled"]

MAX_SAMPLES: Final = 1024
"""The most samples a prompt may ask for."""

_SEED_RANGE: Final = 2**31
"""Seeds stay below 2^31: SGLang and llama.cpp take a signed 32-bit or wider integer."""


def sample_id(prompt_id: str, k: int) -> str:
    """The record id of sample ``k`` of prompt ``prompt_id``: ``<prompt_id>#<k>``."""
    return f"{prompt_id}#{k}"


def sampled(record: PromptRecord, samples: int) -> list[PromptRecord]:
    """``record`` as its ``samples`` records (``[record]`` itself when ``samples`` is 1).

    Each is ``record`` with id :func:`sample_id`, ``sample`` k and ``params.seed`` the row's seed
    (else ``crc32`` of the prompt id) plus k, modulo 2^31.
    """
    if samples == 1:
        return [record]
    base = record.params.seed if record.params.seed is not None else zlib.crc32(record.id.encode())
    return [
        msgspec.structs.replace(
            record,
            id=sample_id(record.id, k),
            sample=k,
            params=msgspec.structs.replace(record.params, seed=(base + k) % _SEED_RANGE),
        )
        for k in range(samples)
    ]


def reseeded(record: PromptRecord) -> PromptRecord:
    """A sample's record for its next attempt (``kafkagen regenerate``): its seed moved on by
    :data:`MAX_SAMPLES`, so the new generation is not the old one repeated and never takes a
    sibling sample's seed; any other record unchanged."""
    seed = record.params.seed
    if record.sample is None or seed is None:
        return record
    params = msgspec.structs.replace(record.params, seed=(seed + MAX_SAMPLES) % _SEED_RANGE)
    return msgspec.structs.replace(record, params=params)
