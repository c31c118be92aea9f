"""``python3 -m sessions_admin demo`` starts the dashboard; ``... test`` runs the whole suite."""

from __future__ import annotations

import argparse
import sys

from sessions_admin import devtools


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sessions_admin")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="start the dashboard on the embedded store with demo data"
    )
    demo.add_argument("--bind", default="127.0.0.1:8000")
    demo.add_argument(
        "--no-simulator",
        action="store_true",
        help="no simulated runtime writing in the background (or SESSIONS_ADMIN_DEMO_SIMULATOR=0)",
    )
    commands.add_parser("test", help="run the whole test suite (SQLite, then PostgreSQL)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        return devtools.run_demo(args.bind, simulator=not args.no_simulator)
    return devtools.run_tests(rest)


if __name__ == "__main__":
    sys.exit(main())
