"""Which members count as idle and how many prompts this consumer may lend them
(consumers/lending.py): member reports built here, servers are in-process SGLang-API simulators
over real sockets."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from consumers.lending import Lending
from consumers.servers import ServerClient
from simulator import SimulatedServer
from streams.config import Settings
from streams.control import MemberReport

MODEL = "Qwen/Qwen3-8B"


def report(instance: str, server: str, **fields: Any) -> MemberReport:
    base: dict[str, Any] = {
        "run_id": "r",
        "instance": instance,
        "incarnation": "x",
        "host": "h",
        "pid": 1,
        "server": server,
        "model": MODEL,
        "at": time.time(),
        "waiting": 0,
    }
    return MemberReport(**(base | fields))


@contextlib.asynccontextmanager
async def lending(
    settings: Settings, own: SimulatedServer, members: dict[str, MemberReport]
) -> AsyncIterator[Lending]:
    """A :class:`Lending` of member "me" on ``own`` (discovered first), 5 prompts waiting; its own
    and its peers' clients closed at the end."""
    client = ServerClient(own.url, settings.generation)
    await client.discover(wait_s=10)
    lend = Lending(
        settings.model_copy(update={"run_id": "r"}),
        own=client,
        instance_id="me",
        members=lambda: members,
        waiting=lambda: 5,
        wake=lambda: None,
    )
    try:
        yield lend
    finally:
        await lend.aclose()
        await client.aclose()


@pytest.fixture
async def two() -> Any:
    async with SimulatedServer() as a, SimulatedServer() as b:
        yield a, b


async def test_only_fresh_running_up_members_with_nothing_waiting_on_the_same_model_are_idle(
    settings: Settings, two: tuple[SimulatedServer, SimulatedServer]
) -> None:
    own, other = two
    now = time.time()
    members = {
        "me": report("me", own.url),
        "idle": report("idle", other.url),
        "busy": report("busy", "http://127.0.0.1:1", waiting=3),
        "stale": report("stale", "http://127.0.0.1:2", at=now - 60),
        "down": report("down", "http://127.0.0.1:3", server_up=False),
        "halted": report("halted", "http://127.0.0.1:4", state="halted"),
        "other-model": report("other-model", "http://127.0.0.1:5", model="gemma"),
        "other-run": report("other-run", "http://127.0.0.1:6", run_id="another"),
        "same-server": report("same-server", own.url + "/"),
    }
    async with lending(settings, own, members) as lend:
        assert [r.instance for r in lend.idle_members(now)] == ["idle"]
        assert lend.borrowers(now) == 2  # "busy" waits too; the stale and halted ones do not count


async def test_free_places_are_slots_plus_standing_queue_less_load_shared_by_borrowers(
    settings: Settings, two: tuple[SimulatedServer, SimulatedServer]
) -> None:
    own, other = two
    members: dict[str, MemberReport] = {}
    async with lending(settings, own, members) as lend:  # discovery first: the reports are fresh below
        members |= {
            "idle": report("idle", other.url),
            "busy": report("busy", "http://127.0.0.1:1", waiting=3),
        }
        await lend.read_once()
        places = other.profile.max_running_requests + settings.consumer.standing_queue
        assert lend.room() == -(-places // 2)  # two borrowers: this one and "busy"
        peer = lend.take()
        assert peer.url == other.url and lend.room() == -(-places // 2) - 1
        members["idle"] = report("idle", other.url, waiting=1)  # it has work again
        await lend.read_once()
        assert lend.room() == 0
        with pytest.raises(LookupError):
            lend.take()


async def test_a_member_reporting_its_server_down_takes_back_what_is_lent_there(
    settings: Settings, two: tuple[SimulatedServer, SimulatedServer]
) -> None:
    own, other = two
    members: dict[str, MemberReport] = {}
    async with lending(settings, own, members) as lend:
        members["idle"] = report("idle", other.url)
        await lend.read_once()
        peer = lend.peers[other.url]
        assert not peer.down.is_set()
        members["idle"] = report("idle", other.url, server_up=False, state="server_down")
        await lend.read_once()
        assert peer.down.is_set() and lend.room() == 0
