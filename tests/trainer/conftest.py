"""Shared, expensive fixtures: the tiny model (built once per session into a temp cache)."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mosearch-cache")
    old = os.environ.get("MOSEARCH_CACHE")
    os.environ["MOSEARCH_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("MOSEARCH_CACHE", None)
    else:
        os.environ["MOSEARCH_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_model(model_cache):
    from trainer.models.tiny import resolve_model

    return resolve_model("tiny")


@pytest.fixture(scope="session")
def ray_local():
    """ONE local Ray for every test that needs it, with 4 emulated `cpu-local` devices."""
    import ray

    from trainer.placement import _loopback_only

    started = not ray.is_initialized()
    if started:
        with _loopback_only():  # as a local `mosearch train` starts its Ray: every listener on 127.0.0.1
            ray.init(num_cpus=8, resources={"gpu:cpu-local": 4}, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, _node_ip_address="127.0.0.1")
    yield ray
    if started:
        ray.shutdown()


class _Remote:
    """Calls on a Ray actor that read like local calls."""

    def __init__(self, actor):
        self.actor = actor

    def __getattr__(self, name):
        import ray

        method = getattr(self.actor, name)
        return lambda *a, **kw: ray.get(method.remote(*a, **kw))


@pytest.fixture(scope="session")
def local_calls():
    """Wrap a Ray actor so that `wrapped.f(x)` is `ray.get(actor.f.remote(x))`."""
    return _Remote


@pytest.fixture
def plan_file(tmp_path):
    """Write a variant of the local test plan: plan_file(mode=..., pools=..., ...)."""
    from pathlib import Path

    import yaml

    base = yaml.safe_load((Path(__file__).parent / "data" / "local_plan.yaml").read_text())

    def make(name="plan.yaml", **changes):
        data = {**base}
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path

    return make


@pytest.fixture(scope="session")
def tiny_moe_model(model_cache):
    from trainer.models.tiny import resolve_model

    return resolve_model("tiny-moe")
