"""Which prompts-topic partition a record goes to (``producer.key_by``, ``--key-by``).

The Kafka key is always the record id (UTF-8); ``key_by`` only chooses the partition.

``balanced`` (default)
    Deals an input's lines round-robin over the partitions: line ``n`` of an input goes to
    partition ``(n - 1 + s) % partitions``, where ``s`` is :func:`input_salt`, a stable hash
    (BLAKE2b) of the input's identity (its resolved path, S3 URI or stdin digest,
    :class:`streams.inputs.OpenedInput`), so several small inputs do not all start on partition 0.
    Each input is spread to within one record per partition, and the choice is a function of the
    line, so a re-run after a crash puts a line where the first run did. A consumer owns whole
    partitions and nothing moves work between them, so the busiest partition sets the run's
    makespan: hashing 20,000 ids put 5 % more prompts on the busiest partition than the mean
    (``BENCHMARKS.md``, generation fleet); dealing them evens the counts.
``id``
    ``murmur2(key) % partitions``, exactly what Kafka's Java default partitioner does (Kafka's
    ``clients/.../producer/internals/BuiltInPartitioner.java``, ``partitionForKey``:
    ``toPositive(murmur2(key)) % partitions``; ``murmur2`` from aiokafka 0.14's
    ``aiokafka/partitioner.py``): an id always lands on the same partition; the spread is even only
    on average.
``prefix``
    Hashes (BLAKE2b) the record's shared prefix: its leading system messages and its tools, as
    sorted-key JSON. Prompts sharing a prefix land on the same partition, hence the same consumer
    and server and its prefix cache; a record with neither system message nor tools has no shared
    prefix and is dealt as in ``balanced``. One prefix shared by every record puts everything on
    one partition: use ``prefix`` only when there are several distinct prefixes.

Pure functions, the same in every process (``hash()`` is salted per process; these are not).
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
    """The prompts-topic partition (``0 <= p < partitions``) of ``record`` (rules: the module
    docstring).

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
