"""`mosearch export-model RUN --out DIR`: a training run's model as a Hugging Face directory."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-model", help="write a training run's model as a Hugging Face directory",
                       description="Write the model of a `mosearch train` checkpoint (any layout: TP, PP and "
                                   "ZeRO/FSDP shards merged) as a Hugging Face directory that from_pretrained "
                                   "and vLLM load: safetensors, config, generation config, tokenizer.")
    p.add_argument("run_dir", metavar="RUN", help="run directory of `mosearch train` (or one checkpoint directory)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint of this step (default: the newest valid)")
    p.add_argument("--out", required=True, help="directory to write (replaced if it holds an earlier export)")
    p.set_defaults(func=run)


def run(args) -> int:
    from trainer.export_model import export

    export(args.run_dir, args.out, args.step, log=lambda m: print(m, file=sys.stdout))
    return 0
