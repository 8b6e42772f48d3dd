"""Benchmarks, each module measuring one thing and writing one table: the ones behind `mosearch bench ...`
and the others, each run as `python -m mosearch.bench.NAME`. Their inputs written for them (clusters,
workloads, published measurements) are under benchmarks/ at the repository root."""

from pathlib import Path


def publish(out: str | Path, text: str, echo: bool = True) -> None:
    """A benchmark's table written in one step (never half a file), and printed."""
    from problems.atomic import atomic_write_text

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out), text)
    print(text if echo else f"wrote {out}")
