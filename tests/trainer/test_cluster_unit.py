"""Joining a Ray cluster without starting one: GPU types and regions read from `ray.nodes()`,
names matched, bundles and label selectors built, the token found, bad addresses refused."""

import socket

import pytest

from problems.errors import InputError
from problems.placement.plan import load_plan
from trainer import cluster as C
from trainer import placement as P


def _node(resources, labels=None, alive=True):
    return {"Alive": alive, "Resources": resources, "Labels": labels or {}}


def _pool(gpu, region, r, t):
    return {"pool": f"{gpu}@{region}", "gpu": gpu, "region": region, "rollout_gpus": r, "train_gpus": t,
            "shared_gpus": 0, "rollout_tp": 1}


NODES = [
    _node({"CPU": 8, "GPU": 8, "accelerator_type:H100": 1}, {"region": "us-east"}),
    _node({"CPU": 8, "GPU": 4, "accelerator_type:L4": 1}, {"region": "us-east"}),  # a 2nd type in us-east
    _node({"CPU": 8, "GPU": 8, "accelerator_type:A100": 1, "gpu:A100-80G": 8}, {"region": "eu-west"}),
    _node({"CPU": 8, "GPU": 8, "accelerator_type:H100": 1}, {"region": "eu-west"}),
    _node({"CPU": 8, "GPU": 8, "accelerator_type:H100": 1}, {"region": "us-east"}, alive=False),
]


def test_types_and_regions_from_nodes():
    f = P.from_nodes(NODES, "head:6379")
    assert f.devices == {"H100": 16, "L4": 4, "A100-80G": 8}  # the dead node does not count
    # a node's gpu:<TYPE> wins over the accelerator_type Ray set on it (A100 of either size)
    assert f.resource == {"H100": "accelerator_type:H100", "L4": "accelerator_type:L4", "A100-80G": "gpu:A100-80G"}
    assert f.regions == {"H100": {"us-east": 8, "eu-west": 8}, "L4": {"us-east": 4}, "A100-80G": {"eu-west": 8}}
    assert f.cuda and f.describe() == "A100-80G x8 in eu-west, H100 x8 in eu-west, H100 x8 in us-east, L4 x4 in us-east"
    f = P.from_nodes(NODES[:1] + [_node({"CPU": 8, "gpu:H100": 2})])  # one node without a region label
    assert f.regions == {"H100": {"us-east": 8}} and f.describe() == "H100 x8 in us-east, H100 x2 in no region"


def test_names_match_by_words_not_substrings():
    assert P._match("H100", {"NVIDIA H100 80GB HBM3": 8}) == "NVIDIA H100 80GB HBM3"
    assert P._match("A100-80G", {"A100": 8}) == "A100"
    assert P._match("A100-80G", {"A100-40G": 8}) is None
    assert P._match("L4", {"L40S": 8}) is None and P._match("L40S", {"L4": 8}) is None
    assert P._match("L4", {"L40S": 8, "L4": 2}) == "L4"


def test_regions_are_checked_per_type_and_region(plan_file):
    found = P.from_nodes(NODES, "head:6379")
    ok = load_plan(plan_file(name="ok.yaml", pools=[_pool("H100", "us-east", 4, 4), _pool("L4", "us-east", 0, 4),
                                                    _pool("A100-80G", "eu-west", 8, 0)],
                             train={"dp": 8, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4}))
    lay = P.layout(ok, found, emulate=False)
    assert lay.pool_regions == {"H100@us-east": "us-east", "L4@us-east": "us-east", "A100-80G@eu-west": "eu-west"}
    s_r, s_t = P.selectors(lay)
    assert s_r == [{"region": "us-east"}] * 4 + [{"region": "eu-west"}] * 8
    assert s_t == [{"region": "us-east"}] * 8
    b_r, b_t = P.bundles(lay, found)
    assert b_r[0] == {"CPU": 2, "GPU": 1, "accelerator_type:H100": P.ACCEL_SHARE}
    assert b_r[-1] == {"CPU": 2, "GPU": 1, "gpu:A100-80G": 1}
    assert b_t[-1] == {"CPU": 2, "GPU": 1, "accelerator_type:L4": P.ACCEL_SHARE}
    opts = P.actor_options("L4", found, 0.5, (None, 0))
    assert opts["num_gpus"] == 0.5 and opts["resources"] == {"accelerator_type:L4": P.ACCEL_SHARE}
    # 12 L4 in us-east: the cluster has 4 there (and none anywhere else)
    bad = load_plan(plan_file(name="bad.yaml", pools=[_pool("L4", "us-east", 4, 8), _pool("H100", "eu-west", 8, 0)],
                              train={"dp": 8, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4}))
    with pytest.raises(InputError) as err:
        P.layout(bad, found, emulate=False, plan_file="bad.yaml")
    line = err.value.line()
    assert line.startswith("bad.yaml: pools: plan for cluster 'local' needs L4 x12 in region us-east (found 4) "
                           "for 4 rollout + 8 train in L4@us-east; the Ray cluster at RAY_ADDRESS=head:6379 has ")
    assert "H100 x8 in region eu-west" not in line  # that one fits
    with pytest.raises(InputError) as err:
        P.layout(bad, found, emulate=True)
    assert err.value.line().startswith("RAY_ADDRESS: --emulate runs a plan on this machine's own Ray")


def test_unlabelled_cluster_places_by_type_and_says_so(plan_file):
    found = P.from_nodes([_node({"CPU": 8, "gpu:H100": 2}), _node({"CPU": 8, "gpu:A100-80G": 2})], "head:6379")
    assert found.regions == {} and not found.cuda
    plan = load_plan(plan_file(pools=[_pool("H100", "us-east", 1, 1), _pool("A100-80G", "eu-west", 1, 1)],
                               train={"dp": 2, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4}))
    lay = P.layout(plan, found, emulate=False)
    assert lay.pool_regions == {} and P.selectors(lay) == (None, None)
    assert any("no 'region' label" in n and "us-east" in n for n in lay.notes)
    assert P.bundles(lay, found)[0] == [{"CPU": 2, "gpu:H100": 1}, {"CPU": 2, "gpu:A100-80G": 1}]


def test_token_sources_in_rays_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    assert C.find_token() == (None, "")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    assert C.find_token() == ("home-token", str(tmp_path / ".ray" / "auth_token"))
    f = tmp_path / "tok"
    f.write_text("file-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(f))
    assert C.find_token() == ("file-token", f"RAY_AUTH_TOKEN_PATH ({f})")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert C.find_token()[0] == "env-token"
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(InputError) as err:
        C.find_token()
    assert err.value.line() == (f"RAY_AUTH_TOKEN_PATH: cannot read {tmp_path / 'missing'}: No such file or directory "
                                "(a file holding the Ray cluster's token)")


def test_bad_and_unreachable_addresses_are_one_line():
    with pytest.raises(InputError) as err:
        C.check("http://head")
    assert err.value.line() == ("RAY_ADDRESS: got 'http://head' "
                                "(HOST:PORT of the Ray head, as `ray start --head` printed it)")
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(InputError) as err:
            C.check(f"127.0.0.1:{port}")
    assert err.value.line() == (f"RAY_ADDRESS: no Ray cluster answers at 127.0.0.1:{port}: connection refused "
                                "(start one with `ray start --head --port=PORT` and set RAY_ADDRESS to the address "
                                "it prints, or unset RAY_ADDRESS to train on this machine)")


def test_a_server_that_is_not_a_ray_head_is_one_line():
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))  # gRPC, but serving nothing of Ray's
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(InputError) as err:
            C.check(f"127.0.0.1:{port}")
    finally:
        server.stop(None)
    line = err.value.line()
    assert line.startswith(f"RAY_ADDRESS: 127.0.0.1:{port} does not answer as a Ray cluster's head (UNIMPLEMENTED: ")
    assert line.endswith("(HOST:PORT of the Ray head's GCS, as `ray start --head` printed it)") and "\n" not in line
