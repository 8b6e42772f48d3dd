"""A plan checked against the cluster and workload it will run on: rules the plan schema alone
cannot see (it knows no head counts or node sizes). One line per problem, like every spec error."""

from __future__ import annotations

from problems.errors import InputError
from problems.placement.plan import Plan
from problems.placement.specs import Cluster, Workload


def check_plan(plan: Plan, workload: Workload, cluster: Cluster | None = None, path: str | None = None) -> None:
    """Every GPU the plan uses runs the workload's precision; rollout and training TP must shard the
    model's attention heads and KV heads and tile a node; the staleness bound may not exceed the
    workload's max_staleness."""
    k, most = plan.execution.staleness_bound, workload.max_staleness
    if k > most:
        # the model's encoding would clip it to the workload's bound and score another plan; an export
        # would run samples staler than the workload allows
        raise InputError(path, "execution.staleness_bound", f"{k} is above the workload's max_staleness {most}",
                         f"at most {most}, the max_staleness of {workload.path}")
    model = workload.model
    nodes = {p.id: p.gpus_per_node for p in cluster.pools} if cluster is not None else {}
    sizes = {p.id: p.node_sizes for p in cluster.pools if p.node_sizes} if cluster is not None else {}
    # a pool of machines of different sizes is planned as nodes of their common divisor (`Cluster.notes`)
    uneven = lambda pool: (f" (its machines of {' and '.join(map(str, sorted(set(sizes[pool]), reverse=True)))} "  # noqa: E731
                           "GPUs are planned as nodes of their common divisor)" if pool in sizes else "")
    gpus = {p.id: p.gpu for p in cluster.pools} if cluster is not None else {}
    for i, p in enumerate(plan.pools):
        why = gpus[p.pool].precision_problem(workload.precision) if p.used_gpus and p.pool in gpus else None
        if why:
            raise InputError(path, f"pools[{i}].pool", why, f"a plan without {p.pool}: `mosearch plan` leaves out "
                             f"the pools that cannot run the workload's {workload.precision}")
    for i, p in enumerate(plan.pools):
        if p.rollout_engines == 0:
            continue
        why = model.tp_problem(p.rollout_tp, kv_replicas=True)
        if why:
            # vLLM gives each rank heads/tp query heads, and kv_heads/tp KV heads or a replica of one
            rule = (f"a divisor of the {model.heads} attention heads that divides the {model.kv_heads} KV heads or is a "
                    "multiple of them (vLLM)")
            node = nodes.get(p.pool)
            if node:
                fits = [t for t in range(1, node + 1) if node % t == 0 and model.tp_problem(t, kv_replicas=True) is None]
                rule += f"; on {p.pool}: {', '.join(map(str, fits))}"
            raise InputError(path, f"pools[{i}].rollout_tp", why, rule)
        if p.pool in nodes and nodes[p.pool] % p.rollout_tp:
            raise InputError(path, f"pools[{i}].rollout_tp", f"TP {p.rollout_tp} does not tile a node of "
                             f"{p.pool}", f"a divisor of its {nodes[p.pool]} GPUs per node{uneven(p.pool)}")
    tp = plan.train.tp
    why = model.tp_problem(tp, kv_replicas=False)
    if why:
        raise InputError(path, "train.tp", why, f"a divisor of the {model.heads} attention heads and of the "
                         f"{model.kv_heads} KV heads (Megatron)")
    train_nodes = [(nodes[p.pool], p.pool) for p in plan.pools if p.train_gpus + p.shared_gpus and p.pool in nodes]
    bad = [(n, pool) for n, pool in train_nodes if n % tp]
    if bad:
        raise InputError(path, "train.tp", f"TP {tp} does not tile a training node of {bad[0][0]} GPUs",
                         f"a divisor of every training pool's GPUs per node{uneven(bad[0][1])}")
