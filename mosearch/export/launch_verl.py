"""Start a verl export whose rollout and training sit on different GPU types, each role on its planned nodes.

    python -m mosearch.export.launch_verl --config-path DIR --config-name NAME [hydra overrides]

verl 0.9.1 sizes its Ray resource pools by GPU count only (ResourcePoolManager: `global_pool` for the
trainer, `rollout_pool_<i>` for each standalone rollout replica); every bundle asks for one GPU, so Ray may
put the trainer on the rollout's GPU type. The export's header starts Ray on each node with custom
resources, one unit per GPU each role may take there (`ray start --resources='{"mosearch_train": 8}'`).
This launcher makes every placement group of those pools ask for one unit of its role's resource per
bundle (per GPU), then runs verl's own entry point (`verl.trainer.main_ppo.main`) unchanged:

- `install()` wraps `placement_group` as verl's RayResourcePool calls it (verl.single_controller.ray.base)
  and adds the role's resource to each bundle, chosen by the pool name verl gives the group;
- the pools are created inside verl's TaskRunner, a Ray actor, so the launcher adds the hook to the Ray job's
  runtime_env (`ray_kwargs.ray_init.runtime_env.worker_process_setup_hook`, which verl passes to ray.init):
  every worker process of the job runs `install()` before it runs verl's code. mosearch must be importable
  on every node.
"""

from __future__ import annotations

import sys

HOOK = "mosearch.export.launch_verl.install"
TRAIN_RESOURCE, ROLLOUT_RESOURCE = "mosearch_train", "mosearch_rollout"  # as mosearch.export.launch.ROLE_RESOURCE


def resource_for(pg_name: str) -> str | None:
    """The role resource of a placement group by the name verl gives it (`{pool name}verl_group_...`):
    the trainer's global pool, the rollout replicas' pools; others (reward or teacher models) unpinned."""
    if pg_name.startswith("global_pool"):
        return TRAIN_RESOURCE
    if pg_name.startswith("rollout_pool_") and not pg_name.startswith(("rollout_pool_reward_", "rollout_pool_teacher_")):
        return ROLLOUT_RESOURCE
    return None


def pinned_bundles(bundles: list[dict], pg_name: str) -> list[dict]:
    """Each bundle (one GPU's worker) also asks for one unit of its role's resource."""
    res = resource_for(pg_name or "")
    if res is None:
        return bundles
    return [{**b, res: 1} for b in bundles]


def install() -> None:
    """Make verl's resource pools ask for the role resources (idempotent; also Ray's worker setup hook)."""
    from verl.single_controller.ray import base

    current = base.placement_group
    if getattr(current, "_mosearch_pinned", False):
        return

    def placement_group(bundles, strategy="PACK", name="", *args, **kwargs):
        return current(pinned_bundles(list(bundles), name), strategy, name, *args, **kwargs)

    placement_group._mosearch_pinned = True
    base.placement_group = placement_group


def argv_for_verl(argv: list[str]) -> list[str]:
    """verl's command line: the user's, plus the runtime_env hook that installs the pinning in Ray's workers."""
    return [*argv, f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}"]


def main(argv: list[str] | None = None) -> None:
    install()  # the driver too (verl's pools are created in its TaskRunner actor; this costs nothing)
    from verl.trainer import main_ppo

    sys.argv = [main_ppo.__file__, *argv_for_verl(list(sys.argv[1:] if argv is None else argv))]
    main_ppo.main()


if __name__ == "__main__":
    main()
