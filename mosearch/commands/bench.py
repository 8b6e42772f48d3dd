"""`mosearch bench <what>`: a group of benchmark subcommands.

Each benchmark lives in its own module exposing `add_arguments(parser)` and
`run(args) -> int`. To add one (say `mosearch bench planners`), add a line to
BENCHMARKS below; nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib

# name -> (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "algorithms": ("mosearch.bench.algorithms", "MaOEA-CS vs published numbers and baselines on MaF1-MaF15 (IGD table)"),
    "planners": ("mosearch.bench.planners", "MaOEA-CS vs baseline searches and planners on the placement problem (HV, anytime, plan quality, speed)"),
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark and write its table under results/bench/")
    group = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    group.required = True
    for name, (module, help_text) in BENCHMARKS.items():
        sp = group.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sp)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return importlib.import_module(BENCHMARKS[args.bench][0]).run(args)
