"""Evaluating a population across Ray tasks, for performance models too slow to vectorise
(calibrated profiles, custom predictors). Ray is imported only when `--jobs` asks for it."""

from __future__ import annotations

import numpy as np


def _evaluate_chunk(problem, X, keys):
    out = problem.evaluate(X, return_values_of=list(keys), return_as_dictionary=True)
    return {k: np.asarray(out[k]) for k in keys}


class RayEvaluation:
    """Splits each population into `jobs` chunks, one Ray task each; the problem is put in the
    object store once."""

    def __init__(self, problem, jobs: int):
        import ray

        self.ray = ray
        self.jobs = int(jobs)
        self.started = not ray.is_initialized()
        if self.started:
            ray.init(num_cpus=self.jobs, include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.problem_ref = ray.put(problem)
        self.task = ray.remote(num_cpus=1)(_evaluate_chunk)

    def __call__(self, X: np.ndarray, keys: list[str]) -> dict[str, np.ndarray]:
        chunks = [c for c in np.array_split(X, self.jobs) if len(c)]
        outs = self.ray.get([self.task.remote(self.problem_ref, c, keys) for c in chunks])
        return {k: np.concatenate([o[k] for o in outs]) for k in keys}

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
