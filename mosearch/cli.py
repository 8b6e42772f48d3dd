"""The `mosearch` command line: a thin dispatcher over `mosearch.commands.*`."""

from __future__ import annotations

import argparse
import importlib
import sys

from problems.errors import InputError

# Modules under mosearch.commands, in the order `mosearch --help` lists them.
COMMANDS = [
    "demo",
    "inspect",
    "bench",
    "plan",
    "pick",
    "show",
    "export",
    "import_config",
    "predict",
    "train",
    "export_model",
    "profile",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosearch",
        description="Plan and run RL post-training on mixed GPU clusters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"mosearch.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # an argument file that cannot be read (@FILE) is an InputError
        code = args.func(args)
    except InputError as err:
        print(f"mosearch: {err.line()}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("mosearch: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
