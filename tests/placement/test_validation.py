"""The validation script runs on the bundled measured data and decode meets its target."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_model_validation_table(tmp_path):
    from mosearch.bench import model_validation

    out = tmp_path / "mv.md"
    assert model_validation.main(["--out", str(out)]) == 0
    text = out.read_text()
    rows = re.findall(r"\| (\S+) \| decode \((held-out|in-sample)\) \| ([\d.]+)% \|", text)
    assert {r[0] for r in rows} == {"A100", "A40", "H100"}
    assert all(float(r[2]) <= 15.0 for r in rows)
    assert "eth-easl/sailor" in (ROOT / "problems/placement/data/measured/training_layers.csv").read_text()
