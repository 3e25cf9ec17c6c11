"""A running run's fleet: the servers its main job keeps one generation consumer for
(:class:`streams.control.FleetRecord`, key ``fleet`` on ``<run>.control``), and what changes it.

The main job writes the record at start (:func:`fleet_at_start`), ``kafkagen scale`` its next
version (:func:`scaled_servers`); the running main job follows it (:mod:`launch.scale.watch`).
Consumer names are per server URL, never per position (:func:`program_name`, :func:`instance_id`),
so a server keeps its program and static group membership. docs/runs.md, "Scaling a running run".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launch.supervise import Program
from streams.config import Settings, check_server_url
from streams.control import FleetRecord, RunRecord
from streams.errors import ConfigError
from streams.runs import naming

__all__ = [
    "FleetChange",
    "FleetStart",
    "consumer_program",
    "consumer_programs",
    "fleet_at_start",
    "fleet_change",
    "instance_id",
    "program_name",
    "same_servers",
    "scaled_servers",
    "server_key",
]


def server_key(url: str) -> str:
    """The identity of a server URL: without trailing slashes (``http://h:1`` and ``http://h:1/``
    are one server, as :func:`launch.run.job.plan_run` counts them)."""
    return url.rstrip("/")


def program_name(url: str) -> str:
    """The supervisord program of ``url``'s consumer: ``generate-<host>-<port>[-<path>]-<hash>``
    (:func:`streams.runs.naming.server_slug`: one per URL)."""
    return f"generate-{naming.server_slug(url)}"


def instance_id(run_id: str, url: str) -> str:
    """The static membership id (``group.instance.id``) of the main job's consumer of ``url`` in
    run ``run_id``: ``<run>-generate-<host>-<port>[-<path>]-<hash>``, stable per server URL."""
    return f"{run_id}-generate-{naming.server_slug(url)}"


def same_servers(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether ``a`` and ``b`` name the same servers (order and trailing slashes aside)."""
    return {server_key(u) for u in a} == {server_key(u) for u in b}


@dataclass(frozen=True)
class FleetChange:
    """What turns fleet ``before`` into ``after`` (URLs as ``after`` and ``before`` spell them)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    kept: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def fleet_change(before: Sequence[str], after: Sequence[str]) -> FleetChange:
    """The servers ``after`` adds to ``before``, those it removes and those it keeps (compared
    by :func:`server_key`), each in its list's order."""
    old = {server_key(u) for u in before}
    new = {server_key(u) for u in after}
    return FleetChange(
        added=tuple(u for u in after if server_key(u) not in old),
        removed=tuple(u for u in before if server_key(u) not in new),
        kept=tuple(u for u in after if server_key(u) in old),
    )


def scaled_servers(
    current: Sequence[str],
    *,
    add: Sequence[str] = (),
    remove: Sequence[str] = (),
    servers: Sequence[str] | None = None,
) -> list[str]:
    """The fleet after a ``kafkagen scale``: ``servers`` (``--servers``) as given, or ``current``
    with ``remove`` taken out and ``add`` appended. Adding a server already in the fleet changes
    nothing for it.

    Raises:
        ConfigError: ``servers`` together with ``add`` or ``remove``; a URL that is not an
            http(s) base URL (:func:`streams.config.check_server_url`); a server given twice; a
            removed server that is not in the fleet (the message lists the fleet); a server both
            added and removed; a fleet left with no server (the last one cannot be removed: the
            run would stop generating, and nothing would finish it).
    """
    if servers is not None and (add or remove):
        raise ConfigError(
            "--servers gives the whole fleet: drop --add-server and --remove-server, or --servers"
        )
    for flag, urls in (("--servers", servers or ()), ("--add-server", add), ("--remove-server", remove)):
        seen: set[str] = set()
        for url in urls:
            try:
                check_server_url(url)
            except ValueError as exc:
                raise ConfigError(f"{flag} {exc}") from None
            if server_key(url) in seen:
                raise ConfigError(f"{flag} {url} is given twice: one consumer per server")
            seen.add(server_key(url))
    if servers is not None:
        result = list(servers)
    else:
        both = {server_key(u) for u in add} & {server_key(u) for u in remove}
        if both:
            raise ConfigError(f"{sorted(both)[0]} is both added and removed: give it once")
        have = {server_key(u) for u in current}
        missing = [u for u in remove if server_key(u) not in have]
        if missing:
            raise ConfigError(
                f"--remove-server {missing[0]}: not in the run's fleet ({', '.join(current) or 'empty'})"
            )
        gone = {server_key(u) for u in remove}
        result = [u for u in current if server_key(u) not in gone]
        result += [u for u in add if server_key(u) not in have]
    if not result:
        raise ConfigError(
            "that would remove the run's last server: a run needs at least one (add another server "
            "first, or stop the run: kafkagen gate halt)"
        )
    return result


@dataclass(frozen=True)
class FleetStart:
    """The main job's fleet at start (:func:`fleet_at_start`)."""

    servers: list[str]
    """the servers to start consumers for."""
    record: FleetRecord | None
    """the fleet record to write (None: the one on the topic stands)."""
    note: str | None
    """a line to print when the fleet is not simply the command's servers, else None."""


def fleet_at_start(
    run_id: str,
    command: Sequence[str],
    run: RunRecord | None,
    fleet: FleetRecord | None,
    *,
    by: str,
    now: float,
) -> FleetStart:
    """Which servers the main job starts consumers for, given its command's servers
    (``command``) and the run's records on its control topic:

    * no fleet record (a new run, or one from before fleets): ``command``, written as version 0;
    * the command names the servers the run was last started with (``run.servers``; a re-run of
      the same command, e.g. after the job was killed): the fleet's servers as ``kafkagen
      scale`` left them, nothing written;
    * another list (the user changed the command): ``command``, written as the fleet's next
      version when it differs from the fleet.
    """
    if fleet is None:
        return FleetStart(
            list(command), FleetRecord(run_id=run_id, servers=list(command), version=0, at=now, by=by), None
        )
    if run is not None and same_servers(run.servers, command):
        if same_servers(fleet.servers, command):
            return FleetStart(list(fleet.servers), None, None)
        change = fleet_change(command, fleet.servers)
        note = (
            f"run {run_id}: starting the fleet's {len(fleet.servers)} servers (version {fleet.version}, set "
            f"by {fleet.by}), not this command's --server list: "
            + _describe(change)
            + "; to start other servers, give another --server list or use kafkagen scale"
        )
        return FleetStart(list(fleet.servers), None, note)
    if same_servers(fleet.servers, command):
        return FleetStart(list(command), None, None)
    change = fleet_change(fleet.servers, command)
    record = FleetRecord(run_id=run_id, servers=list(command), version=fleet.version + 1, at=now, by=by)
    note = (
        f"run {run_id}: this command's --server list replaces the fleet (version {fleet.version} -> "
        f"{record.version}): " + _describe(change)
    )
    return FleetStart(list(command), record, note)


def _describe(change: FleetChange) -> str:
    parts = [f"+{u}" for u in change.added] + [f"-{u}" for u in change.removed]
    return " ".join(parts) or "no change"


def consumer_programs(settings: Settings, metrics_port: int | None) -> Callable[[str], Program]:
    """The maker of a server's consumer program (:func:`consumer_program`), with ``--metrics-port``
    ``metrics_port + 2 + i`` when ``metrics_port`` is set, where i counts the servers in the order
    they got a consumer (a server added by ``kafkagen scale`` gets the next; none past 65535)."""
    offsets: dict[str, int] = {}

    def make(url: str) -> Program:
        offset = offsets.setdefault(server_key(url), 2 + len(offsets))
        port = None if metrics_port is None else metrics_port + offset
        return consumer_program(
            settings, url, ["--metrics-port", str(port)] if port and port <= 65535 else []
        )

    return make


def consumer_program(settings: Settings, url: str, metrics_args: Sequence[str] = ()) -> Program:
    """The supervisord program of the main job's consumer of ``url``: ``python -m
    consumers.generate --server URL --instance-id <stable id>`` (:func:`program_name`,
    :func:`instance_id`) plus ``metrics_args`` (``--metrics-port P``)."""
    argv = (
        sys.executable,
        "-m",
        "consumers.generate",
        "--server",
        url,
        "--instance-id",
        instance_id(settings.run_id, url),
        *metrics_args,
    )
    return Program(program_name(url), argv)
