"""Which prompts-topic partition a record goes to (``producer.key_by``, ``--key-by``).

The Kafka key is always the record id (UTF-8); ``key_by`` only chooses the partition: ``balanced``
(default: an input's lines dealt round-robin from a stable offset), ``id`` (Kafka's default
partitioner, murmur2 of the key) or ``prefix`` (a hash of the leading system messages and tools).
Pure functions, the same in every process (``hash()`` is salted per process; these are not).
The rules and their sources (Kafka, aiokafka 0.14): ``docs/producer.md``, "Partitioning".
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from aiokafka.partitioner import murmur2

from streams.config import KeyBy
from streams.records import PromptRecord

__all__ = ["input_salt", "partition_for", "stable_hash"]


def stable_hash(data: bytes) -> int:
    """A 64-bit hash (``0 <= h < 2**64``) of ``data`` (BLAKE2b) that, unlike ``hash()``, is the same
    in every process."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def input_salt(identity: str) -> int:
    """The stable offset (>= 0) an input's round-robin starts from: a hash of its identity."""
    return stable_hash(identity.encode())


def partition_for(
    record: PromptRecord, key: bytes, partitions: int, key_by: KeyBy, *, line: int, salt: int
) -> int:
    """The prompts-topic partition (``0 <= p < partitions``) of ``record`` (rules:
    ``docs/producer.md``, "Partitioning").

    Args:
        key: the record's Kafka key (:func:`streams.records.key_of` of its id).
        partitions: the topic's partition count (> 0).
        key_by: ``balanced``, ``id`` or ``prefix``.
        line: the record's 1-based line number in its input.
        salt: :func:`input_salt` of the input's identity.
    """
    if key_by == "id":
        return (int(murmur2(key)) & 0x7FFFFFFF) % partitions
    if key_by == "prefix":
        system: list[dict[str, Any]] = []
        for message in record.messages:
            if message.get("role") != "system":
                break
            system.append(message)
        if system or record.tools:
            prefix = msgspec.json.encode([system, record.tools or []], order="sorted")
            return stable_hash(prefix) % partitions
    return (line - 1 + salt) % partitions
