"""``python -m launch.stack up|down|status|logs|kill``: run the local Kafka, S3 and LLM servers.

Settings come from ``KAFKAGEN_*`` environment variables (see README, Configuration): one Kafka
node per ``kafka.bootstrap_servers`` address (three addresses: a 3-broker cluster). Services
are named by kind (``kafka``, ``s3``, ``llm``) or one by one (``kafka-2``, ``llm-30000``), so
``kill kafka-2`` then ``up kafka-2`` crashes and restarts one broker. ``--cluster3`` acts on
the tests' 3-broker cluster beside the configured stack (:func:`launch.stack.cluster_beside`).
Exit status: 0 on success, 1 when a service failed (the message says what to do).
"""

from __future__ import annotations

import argparse
import re
import sys

from launch.stack import SERVICES, LocalStack, cluster_beside
from streams.config import Settings, load_settings
from streams.errors import KafkagenError


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m launch.stack", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cluster3",
        action="store_true",
        help="act on the 3-broker Kafka cluster beside the configured stack (home <stack.home>/cluster3, "
        "brokers on the highest configured Kafka port + 2, + 4, + 6); Kafka only",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd, text in [
        ("up", "start the services (idempotent) and wait until they are ready"),
        ("down", "stop the services this stack started"),
        ("status", "show each service, its address and whether it answers"),
        ("logs", "print the end of each service's log"),
        ("kill", "SIGKILL services at once (crash tests); 'up' starts them again"),
    ]:
        p = sub.add_parser(cmd, help=text)
        p.add_argument(
            "services",
            nargs="+" if cmd == "kill" else "*",
            default=[],
            metavar="SERVICE",
            help=f"any of {', '.join(SERVICES)} or one service such as kafka-2"
            + ("" if cmd == "kill" else " (default: all)"),
        )
        if cmd == "logs":
            p.add_argument("-n", "--lines", type=int, default=30, help="lines per service (default 30)")
    args = parser.parse_args(argv)
    kinds = args.services or (["kafka"] if args.cluster3 else list(SERVICES))
    unknown = [k for k in kinds if k not in SERVICES and not re.fullmatch(r"(kafka|llm)-\d+", k)]
    if unknown:
        choices = ", ".join(SERVICES)
        parser.error(f"unknown service {', '.join(unknown)}: choose from {choices} or one such as kafka-2")
    try:
        settings: Settings = load_settings()
        if args.cluster3:
            settings = cluster_beside(settings)
            others = [k for k in kinds if not k.startswith("kafka")]
            if others:
                parser.error(f"--cluster3 holds Kafka only, not {', '.join(others)}")
        stack = LocalStack(settings)
        names = stack.names(kinds)
        if args.command == "up":
            stack.up(kinds, echo=print)
        elif args.command == "down":
            stack.down(kinds, echo=print)
        elif args.command == "kill":
            for name in names:
                print(f"{name}: {'killed' if stack.kill(name) else 'not running'}")
        elif args.command == "status":
            states = stack.status(kinds)
            for s in states:
                state = "ready" if s.ready else ("running, not answering" if s.running else "stopped")
                print(f"{s.name:<10} {state:<24} {s.address:<26} pid {s.pid or '-':<8} log {s.log}")
            return 0 if all(s.ready for s in states) else 1
        else:
            for name in names:
                print(f"==> {stack.processes.log_path(name)} <==")
                print(stack.processes.tail(name, args.lines))
    except KafkagenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
