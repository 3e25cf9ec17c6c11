"""One SGLang-API simulator in a process of its own, for :class:`bench.fleet.sim_fleet.SimFleet`
with ``processes``: ``python -m bench.fleet.sim_worker PORT TIME_SCALE PROFILE`` (``PROFILE``: the
:class:`simulator.SimulatorProfile`, pickled and base64-encoded). Serves until SIGTERM."""

from __future__ import annotations

import asyncio
import base64
import pickle
import signal
import sys

from simulator import SimulatedServer, SimulatorProfile


async def serve(port: int, time_scale: float, profile: SimulatorProfile) -> None:
    """Serve on ``port`` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with SimulatedServer(profile, time_scale=time_scale, port=port):
        await stop.wait()


def main(argv: list[str]) -> int:
    """Entry point; returns the exit status."""
    port, time_scale, blob = int(argv[0]), float(argv[1]), argv[2]
    profile = pickle.loads(base64.b64decode(blob))  # the bench's own object, passed to its child
    if not isinstance(profile, SimulatorProfile):
        raise SystemExit("sim_worker: the profile argument is not a SimulatorProfile")
    asyncio.run(serve(port, time_scale, profile))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
