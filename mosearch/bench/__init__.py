"""Benchmarks behind `mosearch bench ...`: each module measures one thing and writes one table."""
