"""The trainer splits a step's samples over data-parallel replicas as the performance model assumes:
in proportion to replica speed (unequal GPU types finish together), carried by the plan."""

import numpy as np

from problems.placement.plan import load_plan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload
from trainer import placement as P
from trainer.batch import split, split_counts


def test_split_counts_round_within_one_and_add_up():
    assert split_counts(10, [1, 1]) == [5, 5]
    assert split_counts(10, [3, 1]) == [8, 2]  # 7.5 / 2.5: the larger remainder first, then in order
    assert split_counts(7, [1, 1, 1]) == [3, 2, 2]
    assert [len(x) for x in split(list(range(9)), [2.0, 1.0])] == [6, 3]
    assert sum(split(list(range(9)), [2.0, 1.0]), []) == list(range(9))  # every sample once, in order


def test_trainer_split_matches_the_models_shares(tmp_path):
    """On a cluster of H100s and L40Ss: decode plans that train on both, write and reload them, and
    check the trainer's per-replica sample counts against the model's shares."""
    from problems.placement.model.training import replica_shares

    pb = PlacementProblem(load_cluster("problems/clusters/mixed-8.yaml"), load_workload("problems/workloads/tiny-grpo.yaml"))
    rng = np.random.default_rng(1)
    checked = 0
    for i in range(400):
        x = pb.layout.repair(pb.xl + rng.random(pb.n_var) * (pb.xu - pb.xl))[0]
        plan = pb.decode(x, plan_id=f"p{i}", lifetime=False)
        training = [p for p in plan.pools if p.train_gpus + p.shared_gpus >= plan.train.tp * plan.train.pp]
        if len(training) < 2:
            continue
        path = tmp_path / f"p{i}.yaml"
        path.write_text(plan.to_yaml())
        plan = load_plan(path)
        lay = P.layout(plan, P.Found({"H100": 4, "L40S": 4}), emulate=False)
        n = int(pb.ctx.samples)
        counts = [len(s) for s in split(list(range(n)), lay.replica_weights)]
        f = {k: v for k, v in pb.layout.fields(x[None, :]).items()}
        share = replica_shares(pb.ctx, f)[0]  # samples per replica of each pool
        want = [share[[p.pool for p in plan.pools].index(pool)] for pool in lay.train_pools]
        assert sum(counts) == n
        assert all(abs(c - w) < 1.0 for c, w in zip(counts, want)), (counts, want)
        assert len(set(np.round(want, 6))) > 1  # unequal GPUs: the split really is uneven
        checked += 1
        if checked == 5:
            break
    assert checked == 5
