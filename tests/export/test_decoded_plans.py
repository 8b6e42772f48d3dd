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
    """Decoded plans, unrestricted and repaired into each target's space: exported when the target's rules
    hold (the file its header's command starts), else exit 2 with the documented rule in one line. A real
    share is exported: every repaired plan the rules accept, and at least half of them."""
    monkeypatch.chdir(ROOT)  # the plan names its specs relative to the repository root
    cluster, workload = load_cluster(CLUSTER), load_workload(WORKLOAD)
    rng = np.random.default_rng(3)
    for target in ("verl", "areal", "rlinf"):
        pb = PlacementProblem(cluster, workload, executor=target)
        X = pb.layout.repair(pb.xl + rng.random((8, pb.n_var)) * (pb.xu - pb.xl))
        repaired = [pb.decode(x, lifetime=False) for x in X]
        accepted = refused = 0
        for i, plan in enumerate(decoded[:6] + repaired):
            path = tmp_path / f"plan-{target}-{i}.yaml"
            path.write_text(plan.to_yaml())
            why = pb.executor_problem(plan)
            rc = main(["export", str(path), "--to", target])
            captured = capsys.readouterr()
            if why is None:
                assert rc == 0 and captured.err == ""  # specs found, hashes match
                cfg = yaml.safe_load(captured.out)
                assert cfg and "# start it with" in captured.out
                accepted += i >= 6
            else:
                assert rc == 2 and captured.out == ""
                assert why.startswith(pb.executor.runs) and "\n" not in why  # the rule, in the executor's words
                assert captured.err.strip() == f"mosearch: {path}: executor: {why} (a plan of a front searched " \
                                               f"with `mosearch plan --executor {target}`)"
                refused += 1
        assert accepted >= len(repaired) // 2, (target, accepted)
        assert refused >= 1, target  # unrestricted plans the target cannot run are refused
