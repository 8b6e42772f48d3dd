import os
import tempfile
from pathlib import Path

import pytest

# The suite starts dozens of vLLM CPU engines: eager, each starts in seconds instead of compiling
# (trainer/rollout/vllm_engine.py CPU_EAGER_ENV). The session engine of tests/trainer/test_weight_sync.py
# stays compiled, as `mosearch train` runs by default. Set before any Ray starts, so workers inherit it.
os.environ.setdefault("MOSEARCH_VLLM_CPU_EAGER", "1")

# Predictions in tests use the cluster files' profiles as named, whatever machine runs them
# (problems/placement/machine.py), and nothing is measured or cached outside a temporary directory.
os.environ["MOSEARCH_PROFILE"] = "cluster"
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="mosearch-test-cache-")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT
