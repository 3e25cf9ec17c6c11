"""``python -m streams.stack up|down|status|logs``: run the local Kafka, S3 and LLM servers.

Settings come from ``KAFKAGEN_*`` environment variables (see README, Configuration).
Exit status: 0 on success, 1 when a service failed (the message says what to do).
"""

from __future__ import annotations

import argparse
import sys

from streams.config import load_settings
from streams.errors import KafkagenError
from streams.stack import SERVICES, LocalStack


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m streams.stack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd, text in [
        ("up", "start the services (idempotent) and wait until they are ready"),
        ("down", "stop the services this stack started"),
        ("status", "show each service, its address and whether it answers"),
        ("logs", "print the end of each service's log"),
    ]:
        p = sub.add_parser(cmd, help=text)
        p.add_argument(
            "services",
            nargs="*",
            default=[],
            metavar="SERVICE",
            help=f"any of {', '.join(SERVICES)} (default: all)",
        )
        if cmd == "logs":
            p.add_argument("-n", "--lines", type=int, default=30, help="lines per service (default 30)")
    args = parser.parse_args(argv)
    kinds = args.services or list(SERVICES)
    unknown = sorted(set(kinds) - set(SERVICES))
    if unknown:
        parser.error(f"unknown service {', '.join(unknown)}: choose from {', '.join(SERVICES)}")
    try:
        stack = LocalStack(load_settings())
        if args.command == "up":
            stack.up(kinds, echo=print)
        elif args.command == "down":
            stack.down(kinds, echo=print)
        elif args.command == "status":
            states = stack.status(kinds)
            for s in states:
                state = "ready" if s.ready else ("running, not answering" if s.running else "stopped")
                print(f"{s.name:<10} {state:<24} {s.address:<26} pid {s.pid or '-':<8} log {s.log}")
            return 0 if all(s.ready for s in states) else 1
        else:
            for name in stack.names(kinds):
                print(f"==> {stack.processes.log_path(name)} <==")
                print(stack.processes.tail(name, args.lines))
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
