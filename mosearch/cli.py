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
    "calibrate",
]


class Parser(argparse.ArgumentParser):
    """Usage errors in one line, as every input error (`--help` shows the usage)."""

    def error(self, message):
        raise InputError("command line", None, f"{self.prog}: {message}", f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mosearch",
        description="Plan and run RL post-training on mixed GPU clusters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"mosearch.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        # an argument file that cannot be read (@FILE) is an InputError
        args, extra = parser.parse_known_args(argv)
        # a command whose positional inputs may follow its options (`import`'s hydra-style overrides after
        # --cluster, as verl's scripts pass them) takes the rest; anything else left is an error
        into = getattr(args, "trailing_inputs", None)
        if extra and into and not any(e.startswith("-") for e in extra):
            getattr(args, into).extend(extra)
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
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
