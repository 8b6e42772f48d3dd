"""Benchmarks, each module measuring one thing and writing one table: the ones behind `mosearch bench ...`
and the others, each run as `python -m mosearch.bench.NAME`. Their inputs written for them (clusters,
workloads, published measurements) are under benchmarks/ at the repository root."""
