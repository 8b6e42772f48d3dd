"""Search checkpoints: the whole state of a running search as plain data, written atomically.

`DIR/checkpoint/run.json` holds the inputs (paths and sha256), settings and limits of the
run and a run id; it is written when the search starts. `DIR/checkpoint/state.npz` is one
file (one atomic rename) holding the search state at a generation boundary: NumPy arrays
plus a JSON document stored as bytes. It is taken every K evaluated batches.

State captured: which phase runs (MaOEA-CS or Pareto local search); the recording
problem's archive, counters, g_best and history; for MaOEA-CS its population, corners,
nadir and nadir history, phase, operator counts, iteration and evaluation counters and
the PCG64 state of its generator (pymoo 0.6.2 draws everything from `algorithm.random_state`
and does not seed NumPy's global generator); for the local search its generator, the
explored and seen keys and the stale count. Restored into freshly built objects, the
search goes on draw for draw as if never stopped.

Security: nothing here is pickled. Arrays load with `allow_pickle=False` and the rest is
JSON, so a run directory from elsewhere cannot run code when resumed; a malformed
checkpoint is refused in one line.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np

from problems.atomic import atomic_write_bytes, atomic_write_text
from problems.errors import InputError

FORMAT = 1
RUN_FILE = "run.json"
STATE_FILE = "state.npz"
KILL_ENV = "MOSEARCH_INJECT_KILL_AFTER_CHECKPOINTS"  # test hook: SIGKILL the search after N states written
DEFAULT_EVERY = 10  # batches between checkpoints: ~0.1-0.5 s of search on mixed-8 to hetero-1024
_EVALUATED = {"F", "G", "H"}  # what pymoo's evaluator computes


def new_run_id() -> str:
    return uuid.uuid4().hex


# ------------------------------------------------------------------ files


def start(dirpath: Path, run: dict) -> None:
    """A fresh run: drop any older state first, so an old state never pairs with new settings."""
    dirpath.mkdir(parents=True, exist_ok=True)
    (dirpath / STATE_FILE).unlink(missing_ok=True)
    write_run(dirpath, run)


def write_run(dirpath: Path, run: dict) -> None:
    atomic_write_text(dirpath / RUN_FILE, json.dumps({**run, "format": FORMAT}, indent=1) + "\n")


def read_run(dirpath: Path) -> dict:
    path = dirpath / RUN_FILE
    if not path.is_file():
        raise InputError(str(dirpath.parent), None, "no checkpoint/run.json here (nothing to resume)",
                         "a run directory written by `mosearch plan --out DIR`")
    try:
        run = json.loads(path.read_text())
        if run.get("format") != FORMAT:
            raise ValueError(f"format {run.get('format')!r}")
    except (OSError, ValueError, AttributeError) as err:
        raise InputError(str(path), None, f"unreadable checkpoint ({err})", f"checkpoint format {FORMAT}") from None
    return run


def write_state(dirpath: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    doc = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(buf, __meta__=doc, **arrays)
    atomic_write_bytes(dirpath / STATE_FILE, buf.getvalue())


def read_state(dirpath: Path, run_id: str) -> tuple[dict, dict[str, np.ndarray]] | None:
    """The saved state, or None when the run never reached its first checkpoint."""
    path = dirpath / STATE_FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop("__meta__").tobytes().decode())
        if meta.get("run_id") != run_id:
            raise ValueError("state of another run")
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(str(path), None, f"unreadable checkpoint state ({err})",
                         "a state.npz written by `mosearch plan`") from None
    return meta, arrays


class Checkpointer:
    """Writes the state every `every` batches at generation boundaries (`boundary(capture)`)."""

    def __init__(self, dirpath: Path, run_id: str, every: int = DEFAULT_EVERY):
        self.dir = Path(dirpath)
        self.run_id = run_id
        self.every = max(1, int(every))
        self.last = 0  # batches at the last state written (or restored)
        for tmp in self.dir.glob(".*.tmp"):  # a temporary file of a write that was killed
            tmp.unlink(missing_ok=True)
        self.written = 0
        self._kill_after = int(os.environ.get(KILL_ENV) or 0)

    def boundary(self, batches: int, capture) -> None:
        if batches - self.last >= self.every:
            meta, arrays = capture()
            write_state(self.dir, {"run_id": self.run_id, **meta}, arrays)
            self.last = batches
            self.written += 1
            if self.written == self._kill_after:  # a kill -9 that lands mid-search on any machine speed
                os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------ state <-> objects


def _rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def _set_rng(rng: np.random.Generator, state: dict) -> None:
    if state.get("bit_generator") != type(rng.bit_generator).__name__:
        raise ValueError(f"generator {state.get('bit_generator')!r}")
    rng.bit_generator.state = state


def _opt(arrays, name):
    a = arrays.get(name)
    return None if a is None or a.size == 0 and a.ndim == 1 else a


def recorder_state(rec, history: list[dict], wall_s: float) -> tuple[dict, dict]:
    meta = {"n_evals": rec.n_evals, "n_feasible": rec.n_feasible, "last_feasible_share": rec.last_feasible_share,
            "batches": rec.batches, "n_entered": rec.n_entered, "history": history, "wall_s": wall_s}
    arrays = {"rec.X": rec.archive.X, "rec.F": rec.archive.F,
              "rec.g_best": np.empty(0) if rec.g_best is None else rec.g_best}
    return meta, arrays


def restore_recorder(rec, meta: dict, arrays: dict) -> None:
    X, F = arrays["rec.X"], arrays["rec.F"]
    if X.shape[1:] != (rec.n_var,) or F.shape != (len(X), rec.n_obj):
        raise ValueError("archive shape does not match the problem")
    rec.archive._data = (X.astype(float), F.astype(float))
    rec.n_evals, rec.n_feasible = int(meta["n_evals"]), int(meta["n_feasible"])
    rec.last_feasible_share, rec.batches = float(meta["last_feasible_share"]), int(meta["batches"])
    rec.n_entered = int(meta.get("n_entered", 0))
    rec.g_best = _opt(arrays, "rec.g_best")


def _pop_arrays(prefix: str, pop) -> dict:
    if pop is None:
        return {}
    X, F, G, H = pop.get("X", "F", "G", "H")
    return {f"{prefix}.X": X, f"{prefix}.F": F, f"{prefix}.G": G, f"{prefix}.H": H}


def _pop(prefix: str, arrays: dict):
    from pymoo.core.population import Population

    if f"{prefix}.X" not in arrays:
        return None
    X, F, G, H = (arrays[f"{prefix}.{k}"].astype(float) for k in "XFGH")
    pop = Population.new(X=X, F=F, G=G, H=H)
    for ind in pop:
        ind.evaluated = set(_EVALUATED)
    return pop


def maoea_state(algo) -> tuple[dict, dict]:
    s = algo.survival
    meta = {"n_iter": algo.n_iter, "n_eval": algo.evaluator.n_eval, "phase": algo.phase,
            "switch_iter": algo.switch_iter, "rng": _rng_state(algo.random_state),
            "operator_counts": [[p, op, n] for (p, op), n in algo.operator_counts.items()]}
    arrays = {**_pop_arrays("pop", algo.pop), **_pop_arrays("corners", s.corners),
              "nadir": np.empty(0) if s.nadir is None else np.asarray(s.nadir, dtype=float),
              "nadir_history": np.array(algo.nadir_history, dtype=float).reshape(len(algo.nadir_history), -1)}
    if algo.archive is not None and len(algo.archive):
        arrays.update(_pop_arrays("archive", algo.archive))
    return meta, arrays


def restore_maoea(algo, meta: dict, arrays: dict) -> None:
    """Into an algorithm built and `setup` exactly as the checkpointed one was."""
    from pymoo.util.optimum import filter_optimum

    algo.pop = _pop("pop", arrays)
    algo.survival.corners = _pop("corners", arrays)
    algo.survival.nadir = _opt(arrays, "nadir")
    algo.nadir_history = [row for row in arrays["nadir_history"].astype(float)]
    algo.phase, algo.switch_iter = int(meta["phase"]), meta["switch_iter"]
    algo.operator_counts = {(int(p), str(op)): int(n) for p, op, n in meta["operator_counts"]}
    _set_rng(algo.random_state, meta["rng"])
    algo.n_iter = int(meta["n_iter"])
    algo.evaluator.n_eval = int(meta["n_eval"])
    algo.is_initialized = True
    algo.start_time = time.time()  # only for pymoo's result timing
    algo.opt = filter_optimum(algo.pop, least_infeasible=True)
    archive = _pop("archive", arrays)
    if algo.archive is not None and archive is not None:
        algo.archive = algo.archive.add(archive)
    algo.termination.update(algo)


def _key_array(keys: set[bytes], width: int) -> np.ndarray:
    # sets are only tested for membership, so their order is irrelevant
    return np.frombuffer(b"".join(sorted(keys)), dtype=np.uint8).reshape(len(keys), width)


def polish_state(pls) -> tuple[dict, dict]:
    width = 8 * pls.rec.n_var
    return ({"rng": _rng_state(pls.rng), "stale": pls.stale},
            {"polish.explored": _key_array(pls.explored, width), "polish.seen": _key_array(pls.seen, width)})


def restore_polish(pls, meta: dict, arrays: dict) -> None:
    _set_rng(pls.rng, meta["rng"])
    pls.stale = int(meta["stale"])
    pls.explored = {r.tobytes() for r in arrays["polish.explored"]}
    pls.seen = {r.tobytes() for r in arrays["polish.seen"]}


def guarded(restore, target, meta: dict, arrays: dict) -> None:
    """A restore whose malformed input is refused in one line."""
    try:
        restore(target, meta, arrays)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as err:
        raise InputError(None, "checkpoint/state.npz", f"does not fit this search ({err.__class__.__name__}: {err})",
                         "a state written by the same planner version for the same inputs") from None

