"""Run by tests/export/test_launch.py in a process of its own (its own Ray, whatever Ray the test session
runs): a local Ray node started as the header's `ray start` line for a node holding both roles (2 rollout
and 2 training GPUs, as logical GPUs, 2 more free), verl's own pools after `launch_verl.install()`.
Prints what Ray did as JSON."""

from __future__ import annotations

import json

import ray
from verl.single_controller.ray import base

from mosearch.export import launch_verl as LV


def main() -> None:
    ray.init(num_cpus=16, num_gpus=6, resources={LV.ROLLOUT_RESOURCE: 2, LV.TRAIN_RESOURCE: 2},
             include_dashboard=False, log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1")
    try:
        LV.install()
        out: dict = {"bundles": {}}
        for name in ("global_pool", "rollout_pool_0"):
            (pg,) = base.RayResourcePool(process_on_nodes=[2], max_colocate_count=1,
                                         name_prefix=name).get_placement_groups()  # waits until placed
            out["bundles"][name] = pg.bundle_specs
        avail = ray.available_resources()
        out["left"] = {k: avail.get(k, 0) for k in ("GPU", LV.TRAIN_RESOURCE, LV.ROLLOUT_RESOURCE)}
        # a third training GPU: none is there, though two GPUs are free
        more = base.placement_group([{"CPU": 1, "GPU": 1}], strategy="STRICT_PACK", name="global_poolverl_group_1:0")
        out["third_train_placed"] = more.wait(timeout_seconds=3)
        other = base.placement_group([{"CPU": 1, "GPU": 1}], strategy="STRICT_PACK", name="other_pool")
        out["unpinned_placed"] = other.wait(timeout_seconds=30)
        print(json.dumps(out))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
