"""Tail lending: this consumer's waiting prompts sent to idle servers of other members.

A consumer works only its own partitions, so near a run's end a server whose partitions are done
would sit idle while another member still has a backlog. :class:`Lending` reads the other
members' reports on the control topic; a member whose report shows nothing waiting, its server up
and the same model is *idle*. While this consumer has prompts its own window cannot start, it reads
each idle member's server ``/metrics`` every :data:`READ_INTERVAL_S` and may send there as many
prompts as that server has free places (slots + standing queue − running − queued), shared with
the other members that have prompts waiting. A lent prompt stays this consumer's: it writes the
result and commits the offset, so lending moves no offset and adds no duplicate.

Design: docs/consumer.md, "Tail lending".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from consumers.positions.jobs import Job
from consumers.servers import ServerClient
from streams.config import Settings
from streams.control import MemberReport
from streams.errors import ServerError

__all__ = ["READ_INTERVAL_S", "Lending", "Peer"]

log = logging.getLogger("kafkagen.generate")

READ_INTERVAL_S = 0.5
"""seconds between readings of the idle members' ``/metrics`` while prompts wait here."""
_STALE_REPORTS = 3
"""a member report older than this many report intervals (at least 3 s) shows nobody idle."""
_DESCRIBE_S = 5.0
"""seconds a peer's server gets to say what it serves before it is left out."""


@dataclass
class Peer:
    """Another member's server as this consumer lends to it. ``free``: places this consumer may
    still take from the last reading (requests); ``matches``: its kind and model are this
    server's (None: not asked yet)."""

    url: str
    client: ServerClient
    free: int = 0
    matches: bool | None = None
    down: asyncio.Event = field(default_factory=asyncio.Event)
    """set while its member reports the server down: requests lent there are taken back."""


class Lending:
    """Which idle members' servers may take this consumer's waiting prompts, and how many.

    Args:
        settings: ``consumer`` (standing queue, timeouts), ``gate.report_interval_s``.
        own: this consumer's server client (after discovery: its kind and model).
        instance_id: this consumer's member id (its own report is skipped).
        members: the latest report of every member (instance id → report).
        waiting: this consumer's prompts fetched and not started.
        wake: called after a reading found free places (the consumer starts prompts).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        own: ServerClient,
        instance_id: str,
        members: Callable[[], Mapping[str, MemberReport]],
        waiting: Callable[[], int],
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.own = own
        self.instance_id = instance_id
        self.members = members
        self.waiting = waiting
        self.wake = wake
        self.peers: dict[str, Peer] = {}
        self._idle_seen: set[str] = set()

    def _others(self, now: float | None) -> list[MemberReport]:
        """The fresh reports of the other running members of this run (``now``: Unix seconds)."""
        now = time.time() if now is None else now
        stale = max(3.0, _STALE_REPORTS * self.settings.gate.report_interval_s)
        return [
            r
            for instance, r in self.members().items()
            if instance != self.instance_id
            and r.run_id == self.settings.run_id
            and r.state == "running"
            and now - r.at <= stale
        ]

    def idle_members(self, now: float | None = None) -> list[MemberReport]:
        """The fresh reports of other members of this run, running the same model on another
        server, up, with nothing waiting (``now``: Unix seconds)."""
        info = self.own.info
        if info is None:
            return []
        return [
            r
            for r in self._others(now)
            if r.server_up
            and r.waiting == 0
            and r.server.rstrip("/") != self.own.base_url
            and r.model == info.model
        ]

    def borrowers(self, now: float | None = None) -> int:
        """Members with prompts waiting, this one included: they share an idle server's places."""
        return 1 + sum(1 for r in self._others(now) if r.waiting > 0)

    def room(self) -> int:
        """Prompts this consumer may lend now (requests)."""
        return sum(p.free for p in self.peers.values() if p.matches)

    def take(self) -> Peer:
        """The peer with the most free places, one of them taken.

        Raises:
            LookupError: no place is free (:meth:`room` is 0).
        """
        peer = max((p for p in self.peers.values() if p.matches), key=lambda p: p.free, default=None)
        if peer is None or peer.free <= 0:
            raise LookupError("no idle member's server has a free place")
        peer.free -= 1
        return peer

    def lend(self, job: Job, run: Callable[[Job, Peer], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        """The task that runs ``job`` on the idle server with the most free places (``run(job,
        peer)``: :meth:`consumers.process.PromptRunner.run`); marks the job lent.

        Raises:
            LookupError: no place is free (:meth:`room` is 0).
        """
        peer = self.take()
        job.lent_to = peer.url
        return asyncio.create_task(run(job, peer), name=f"lent-{job.key[0]}-{job.key[1]}")

    async def watch(self) -> None:
        """Read the idle members' servers while prompts wait here; never raises."""
        while True:
            try:
                await self.read_once()
            except Exception as exc:  # a bad reading must not stop the consumer
                log.warning("lending: reading idle servers failed: %r", exc)
            await asyncio.sleep(READ_INTERVAL_S)

    async def read_once(self) -> None:
        """One round: which peers' members report their server down; free places of every idle
        member's server, this consumer's share of them."""
        self._mark_down()
        idle = {r.server.rstrip("/"): r for r in self.idle_members()} if self.waiting() > 0 else {}
        for url, peer in self.peers.items():
            if url not in idle:
                peer.free = 0
        if not idle:
            self._idle_seen = set()
            return
        share = self.borrowers()
        if set(idle) != self._idle_seen:
            self._idle_seen = set(idle)
            log.info("lending: %d idle servers, shared by %d members with prompts waiting", len(idle), share)
        for url in idle:
            if url not in self.peers:
                self.peers[url] = Peer(url, ServerClient.for_consumer(url, self.settings))
        await asyncio.gather(*(self._refresh(self.peers[url], share) for url in idle))
        if self.room() > 0:
            self.wake()

    def _mark_down(self) -> None:
        latest: dict[str, MemberReport] = {}
        for r in self.members().values():
            url = r.server.rstrip("/")
            if url not in latest or r.at > latest[url].at:
                latest[url] = r
        for url, peer in self.peers.items():
            last = latest.get(url)
            if last is not None and (not last.server_up or last.state == "server_down"):
                peer.down.set()
            else:
                peer.down.clear()

    async def _refresh(self, peer: Peer, share: int) -> None:
        """Ask a new peer what it serves; read its free places."""
        if peer.matches is None:
            peer.matches = await self._matches(peer)
        if peer.matches:
            peer.free = await self._free(peer, share)

    async def _matches(self, peer: Peer) -> bool:
        """Whether the peer's server is of this server's kind and serves its model."""
        mine = self.own.info
        try:
            theirs = await peer.client.describe(wait_s=_DESCRIBE_S)
        except ServerError as exc:
            log.info("lending: %s left out: %s", peer.url, exc)
            return False
        same = mine is not None and theirs.kind == mine.kind and theirs.model == mine.model
        if not same:
            log.info("lending: %s left out: it serves %s %s", peer.url, theirs.kind, theirs.model)
        return same

    async def _free(self, peer: Peer, share: int) -> int:
        """This consumer's part of the peer server's free places: ``ceil(free / share)``; 0 when
        its ``/metrics`` or its slot count cannot be read."""
        info = peer.client.info
        load = await peer.client.load()
        if load is None or info is None or info.max_running_requests is None:
            return 0
        places = info.max_running_requests + self.settings.consumer.standing_queue
        free = places - load.running - load.queued
        return max(0, -(-free // share))

    async def aclose(self) -> None:
        """Close the peers' clients."""
        for peer in self.peers.values():
            with contextlib.suppress(Exception):
                await peer.client.aclose()
