"""The machine the calibration tests pretend to run on, with machine-following on (the suite turns it off
in tests/conftest.py) and the profile cache in the test's temporary folder."""

from __future__ import annotations

import pytest

from problems.placement import machine

HERE = {"cpu": "Test CPU 9000", "cores": 2, "threads": 1, "torch": "2.13.0+cpu", "gpu": None, "driver": None,
        "cuda": None}


@pytest.fixture
def follow(tmp_path, monkeypatch):
    """Machine-following on, this machine = HERE, the cache in tmp_path (yielded)."""
    monkeypatch.delenv(machine.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(machine, "_HERE", dict(HERE))
    monkeypatch.setattr(machine, "_said", set())
    machine.set_measurer(None)
    yield tmp_path
    machine.set_measurer(None)
