"""How long the README's test command takes, and what it reports, in the checkout it runs from.

    python3 -m mosearch.bench.test_suite --out results/bench/test_suite.md

Runs `./setup.sh` and then `.venv/bin/python -m pytest -q` (the README's test command, what CI runs),
timing each from outside, and writes pytest's closing line with the times. Run it in a fresh clone
(`git clone REPO DIR && cd DIR`) to measure what CI measures: setup.sh's time then includes every install.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mosearch.bench import provenance, publish  # noqa: E402

COMMAND = "./setup.sh && .venv/bin/python -m pytest -q"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    subprocess.run(["./setup.sh"], cwd=ROOT, check=True)
    t_setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    run = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=ROOT,
                         capture_output=True, text=True)
    t_tests = time.perf_counter() - t1
    sys.stdout.write(run.stdout)  # every failure, as pytest -q reports it
    closing = next((ln.strip("= ") for ln in reversed(run.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", ln)),
                   "no closing line")
    text = "\n".join([
        "# The test suite", "", provenance.line(COMMAND), "",
        "| what | figure |", "| --- | --- |",
        f"| pytest's closing line | {closing} |",
        f"| exit status | {run.returncode} |",
        f"| tests, wall | {t_tests / 60:.1f} min |",
        f"| setup.sh, wall | {t_setup / 60:.1f} min |",
        f"| both | {(t_setup + t_tests) / 60:.1f} min |", ""])
    if args.out:
        publish(args.out, text)
    else:
        print(text)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
