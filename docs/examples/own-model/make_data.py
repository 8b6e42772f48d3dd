"""Write the same addition questions in verl's layout (parquet) and in TRL's (JSONL).

    python docs/examples/own-model/make_data.py my-run

verl (its examples/data_preprocess scripts write this): data_source, prompt as chat messages,
ability, reward_model {style, ground_truth}, extra_info {split, index}.
TRL: prompt as chat messages, and any other columns (here `solution`), which TRL passes to the
reward functions by name.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def questions(n: int = 200, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(f"What is {a} plus {b}?", str(a + b)) for a, b in ((rng.randint(0, 19), rng.randint(0, 19)) for _ in range(n))]


def write(out: Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    qs = questions()
    verl = [{"data_source": "addition", "prompt": [{"role": "user", "content": q}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": a},
             "extra_info": {"split": "test" if i % 10 == 0 else "train", "index": i}} for i, (q, a) in enumerate(qs)]
    pq.write_table(pa.Table.from_pylist(verl), out / "verl.parquet")
    with open(out / "trl.jsonl", "w") as f:
        for q, a in qs:
            f.write(json.dumps({"prompt": [{"role": "user", "content": q}], "solution": a}) + "\n")
    return out / "verl.parquet", out / "trl.jsonl"


if __name__ == "__main__":
    print(*write(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
