"""Plans decoded by the real PlacementProblem for mixed-64 export consistently to every target."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from mosearch.cli import main
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload
from mosearch.export import EXPORTERS, NOTES

from .conftest import CLUSTER, ROOT, WORKLOAD


def _expand(ranges: str) -> list[int]:
    out = []
    for part in ranges.split(","):
        a, b = part.split("-")
        out += range(int(a), int(b) + 1)
    return out


@pytest.fixture(scope="module")
def decoded():
    pb = PlacementProblem(load_cluster(CLUSTER), load_workload(WORKLOAD))
    rng = np.random.default_rng(0)
    plans = [pb.decode(pb.xl + rng.random(pb.n_var) * (pb.xu - pb.xl), lifetime=False) for _ in range(30)]
    assert {p.execution.mode for p in plans} == {"colocated", "disaggregated", "async"}
    return plans


def test_gpu_counts_survive_export(decoded, ctx):
    for plan in decoded:
        roll = sum(p.rollout_gpus for p in plan.pools)
        train = sum(p.train_gpus for p in plan.pools)
        shared = sum(p.shared_gpus for p in plan.pools)
        colocated = plan.execution.mode == "colocated"

        verl = EXPORTERS["verl"](plan, ctx)
        tr = verl["trainer"]["nnodes"] * verl["trainer"]["n_gpus_per_node"]
        ro = verl["actor_rollout_ref"]["rollout"]
        even = not any("uneven" in n for n in NOTES["verl"](plan, ctx))
        if colocated:
            assert tr == shared if even else tr >= shared
        else:
            got = (ro["nnodes"] * ro["n_gpus_per_node"], tr)
            assert got == (roll, train) if even else got >= (roll, train)

        areal = EXPORTERS["areal"](plan, ctx)
        dims = dict(re.findall(r"([dtp])(\d+)", areal["actor"]["backend"].split(":")[1]))
        assert np.prod([int(v) for v in dims.values()]) == train + shared
        rd = dict(re.findall(r"([dt])(\d+)", areal["rollout"]["backend"].split(":")[1]))
        assert 1 <= int(rd["d"]) * int(rd["t"]) <= roll + shared
        assert areal["rollout"]["max_head_offpolicyness"] == plan.execution.staleness_bound

        cl = EXPORTERS["rlinf"](plan, ctx)["cluster"]
        if colocated:  # RLinf runs colocated plans only (its rules refuse the others)
            where = cl["component_placement"]["actor,rollout,reward"]
            assert where == "all" or len(_expand(where)) == shared
        ranks = sorted(i for g in cl["node_groups"] for i in _expand(g["node_ranks"]))
        assert ranks == list(range(cl["num_nodes"]))


def test_cli_exports_what_the_target_runs_and_refuses_the_rest(decoded, tmp_path, monkeypatch, capsys):
    """Each decoded plan: exported when the target's rules hold, else exit 2 with the rule in one line."""
    monkeypatch.chdir(ROOT)  # the plan names its specs relative to the repository root
    seen = set()
    for plan in decoded[:12]:
        path = tmp_path / "plan.yaml"
        path.write_text(plan.to_yaml())
        for target in ("verl", "areal", "rlinf"):
            why = PlacementProblem(load_cluster(CLUSTER), load_workload(WORKLOAD), executor=target).executor_problem(plan)
            rc = main(["export", str(path), "--to", target])
            captured = capsys.readouterr()
            seen.add(why is None)
            if why is None:
                assert rc == 0 and captured.err == ""  # specs found, hashes match
                cfg = yaml.safe_load(captured.out)
                assert cfg
            else:
                assert rc == 2 and captured.out == ""
                assert captured.err.strip() == f"mosearch: {path}: executor: {why} (a plan of a front searched " \
                                               f"with `mosearch plan --executor {target}`)"
    assert seen == {False} or seen == {True, False}
