"""The generation consumers' assignor (pure): JoinGroup metadata that no assignment changes (the
F1 rebalance livelock), stickiness through the leader's memory, balance, determinism."""

from __future__ import annotations

from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.structs import TopicPartition

from consumers.group.assignor import StableStickyAssignor, stable_sticky_assignor

TOPIC = "run.prompts"


class _Cluster:
    """The part of aiokafka's ClusterMetadata the sticky algorithm reads: one topic."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return {TOPIC}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.partitions)) if topic == TOPIC else None

    def available_partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.partitions_for_topic(topic)


def _assign(
    leader: type[StableStickyAssignor], members: list[type[StableStickyAssignor]], partitions: int = 7
) -> dict[str, set[int]]:
    """One rebalance: every member's metadata to the leader, the leader's assignment back to each
    member (``on_assignment``); returns instance id -> partitions."""
    metadata = {f"{m.instance_id}-member": m.metadata([TOPIC]) for m in members}
    result = leader.assign(_Cluster(partitions), metadata)
    out = {}
    for m in members:
        assignment = ConsumerProtocolMemberAssignment.decode(result[f"{m.instance_id}-member"].encode())
        m.on_assignment(assignment)
        out[m.instance_id] = {p for _, ps in assignment.assignment for p in ps}
    return out


def _balanced(assignment: dict[str, set[int]], partitions: int = 7) -> bool:
    sizes = [len(v) for v in assignment.values()]
    every = sorted(p for v in assignment.values() for p in v)
    return every == list(range(partitions)) and max(sizes) - min(sizes) <= 1


def test_the_joingroup_metadata_never_changes_with_the_assignment() -> None:
    """aiokafka's sticky assignor puts the member's partitions in its metadata, so every new
    assignment changes it, and Kafka rebalances again when a member rejoins with changed
    metadata: the F1 livelock. Ours stays byte for byte the same."""
    a, b = stable_sticky_assignor("a"), stable_sticky_assignor("b")
    before = a.metadata([TOPIC]).encode()
    _assign(a, [a, b])
    _assign(a, [a])
    assert a.metadata([TOPIC]).encode() == before
    assert a.metadata([TOPIC]).user_data == b"a"

    class Theirs(StickyPartitionAssignor):  # type: ignore[misc]
        pass

    theirs_before = Theirs.metadata([TOPIC]).encode()
    Theirs.on_assignment(ConsumerProtocolMemberAssignment(0, [(TOPIC, [0, 1])], b""))
    assert Theirs.metadata([TOPIC]).encode() != theirs_before, "the library's metadata does change"


def test_losing_a_member_moves_only_its_partitions() -> None:
    members = [stable_sticky_assignor(n) for n in ("a", "b", "c")]
    first = _assign(members[0], members)
    assert _balanced(first)
    second = _assign(members[0], members[:2])
    assert _balanced(second)
    for name in ("a", "b"):
        assert first[name] <= second[name], f"{name} lost a partition it had"


def test_a_new_member_takes_only_what_balance_needs() -> None:
    members = [stable_sticky_assignor(n) for n in ("a", "b")]
    first = _assign(members[0], members)
    third = stable_sticky_assignor("c")
    second = _assign(members[0], [*members, third])
    assert _balanced(second)
    moved = sum(len(first[n] - second[n]) for n in ("a", "b"))
    assert moved == len(second["c"]) == 2, "only the new member's share moved"


def test_a_restarted_member_with_the_same_instance_id_gets_its_partitions_back() -> None:
    """Member ids change on a restart; the instance id in the metadata does not."""
    a, b, c = (stable_sticky_assignor(n) for n in ("a", "b", "c"))
    first = _assign(a, [a, b, c])
    c_again = stable_sticky_assignor("c")
    assert _assign(a, [a, b, c_again]) == first


def test_losing_the_leader_moves_only_its_partitions() -> None:
    """Every member learns the whole assignment from its SyncGroup answer, so a follower that
    becomes leader is as sticky as the old leader was."""
    a, b, c = (stable_sticky_assignor(n) for n in ("a", "b", "c"))
    first = _assign(a, [a, b, c])
    after = _assign(b, [b, c])  # the leader "a" is gone; "b" never led
    assert _balanced(after)
    assert first["b"] <= after["b"] and first["c"] <= after["c"]


def test_a_leader_without_memory_keeps_its_own_partitions_and_balances() -> None:
    a, b, c = (stable_sticky_assignor(n) for n in ("a", "b", "c"))
    first = _assign(a, [a, b, c])
    b.remembered = {}  # as after a restart of the whole group
    after = _assign(b, [b, c])
    assert _balanced(after)
    assert first["b"] <= after["b"]


def test_unreadable_assignment_user_data_leaves_no_memory() -> None:
    a = stable_sticky_assignor("a")
    a.on_assignment(ConsumerProtocolMemberAssignment(0, [(TOPIC, [1])], b"not json"))
    assert a.remembered == {} and a.own == [TopicPartition(TOPIC, 1)]


def test_more_members_than_partitions_leaves_some_idle_and_every_partition_owned() -> None:
    members = [stable_sticky_assignor(f"m{i}") for i in range(9)]
    got = _assign(members[0], members)
    assert sorted(p for v in got.values() for p in v) == list(range(7))
    assert sorted(len(v) for v in got.values()) == [0, 0, 1, 1, 1, 1, 1, 1, 1]


def test_several_consumers_in_one_process_do_not_share_a_memory() -> None:
    a, b = stable_sticky_assignor("a"), stable_sticky_assignor("b")
    _assign(a, [a])
    assert a.remembered and not b.remembered
    assert StableStickyAssignor.remembered == {}
