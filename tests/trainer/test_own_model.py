"""A team's own model and data end to end, as docs/training.md shows it: a locally built Hugging Face
directory (its own BPE tokenizer with a chat template), a verl-layout parquet file and a TRL-layout
JSONL file, verl- and TRL-style rewards from a file path; `mosearch plan` -> `pick` -> train
(colocated with TP 2, async; on the transformers test backend, to keep CI short) -> `mosearch
export-model`, whose directory loads with `from_pretrained` and in a vLLM engine, and gives the
trainer's log-probs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from mosearch.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "own-model"
REWARDS = str(EXAMPLE / "rewards.py")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"own_model_{name}", EXAMPLE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def own(tmp_path_factory, repo_root):
    """The docs' steps: build the model directory, write the data, plan the local cluster, pick the knee."""
    root = tmp_path_factory.mktemp("own")
    _example("build_model").build(root / "model")
    verl, trl = _example("make_data").write(root)
    (root / "workload.yaml").write_text((EXAMPLE / "workload.yaml").read_text())
    assert main(["plan", "--cluster", str(repo_root / "problems" / "clusters" / "local.yaml"), "--workload",
                 str(root / "workload.yaml"), "--out", str(root / "front"), "--evals", "300", "--seed", "0",
                 "--no-report"]) == 0
    front = json.loads((root / "front" / "front.json").read_text())
    assert front  # the planner read the architecture from the directory's config.json
    assert main(["pick", str(root / "front"), "--knee", "--out", str(root / "plan.yaml")]) == 0
    return {"root": root, "verl": verl, "trl": trl, "plan": yaml.safe_load((root / "plan.yaml").read_text())}


def _variant(own, name: str, pool: dict, train: dict, execution: dict) -> Path:
    """The picked plan with this test's pool roles, layout and mode (the knee may change as the planner does)."""
    data = dict(own["plan"])
    data["pools"] = [{**data["pools"][0], "rollout_tp": 1, **pool}]
    data["train"] = {**data["train"], **train}
    data["execution"] = execution
    path = own["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _logprobs(model, samples) -> list[list[float]]:
    import torch

    out = []
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt + s.completion])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            P = len(s.prompt)
            out.append([lp[P - 1 + j, t].item() for j, t in enumerate(s.completion)])
    return out


def test_inspect_and_predict_read_the_directory(own, capsys, repo_root):
    from transformers import AutoModelForCausalLM

    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(own["root"] / "model").parameters())
    assert main(["inspect", "--cluster", str(repo_root / "problems" / "clusters" / "local.yaml"), "--workload",
                 str(own["root"] / "workload.yaml")]) == 0
    assert f"{n:,}" in capsys.readouterr().out  # the planner's count of the directory's architecture
    assert main(["predict", "--plan", str(own["root"] / "plan.yaml")]) == 0
    assert "throughput_samples_s" in capsys.readouterr().out


def test_colocated_tp2_verl_data_exports_a_model_that_gives_the_trainers_logprobs(own, ray_local, monkeypatch, tmp_path):
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForCausalLM

    from trainer.batch import Sample
    from trainer.driver import Driver, RunConfig
    from trainer.models.tiny import load_tokenizer

    monkeypatch.setenv("MOSEARCH_LOCAL_DEVICES", "3")
    plan = _variant(own, "coloc-tp2", {"rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 2},
                    {"dp": 1, "tp": 2, "pp": 1, "sharding": "none", "micro_batch": 8},
                    {"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1})
    model = own["root"] / "model"
    out = tmp_path / "run"
    # verl's compute_score (the file's default function) and a TRL-style shaping reward, weighted
    cfg = RunConfig(plan=str(plan), out=str(out), steps=2, model=str(model), task=str(own["verl"]),
                    reward=[REWARDS, f"{REWARDS}:brevity"], reward_weights=[1.0, 0.5], prompts_per_step=4,
                    group_size=4, max_new_tokens=4, lr=1e-3, eval_every=2, eval_size=8, checkpoint_every=2,
                    progress=False, loggers="tensorboard", backend="hf")  # vLLM loads the export below
    drv = Driver(cfg)
    tok = load_tokenizer(model)
    prompts = drv.train_ids[:3]
    assert all(p[0] == tok.convert_tokens_to_ids("<|im_start|>") for p in prompts)  # the chat template ran
    samples = [Sample(i, p, tok.encode(" 12", add_special_tokens=False) + [tok.eos_token_id], [0.0] * 4, 0.0, 0.0, 0)
               for i, p in enumerate(prompts)]
    for s in samples:
        s.behav_logp = [0.0] * len(s.completion)
    try:
        drv.setup()
        summary = drv.fit()
        trained = drv.train.run("logprobs", samples)[0]  # the trainer's own forward (both TP ranks join)
    finally:
        drv.shutdown()
    assert summary["status"] == "finished" and (summary["layout"]["tp"], summary["mode"]) == (2, "colocated")
    assert summary["run"]["model"] == str(model)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time" in r]
    for r in steps:
        assert {"loss", "entropy", "clip_frac", "reward_std", "response_len_mean", "response_len_max"} <= set(r)
        assert set(r["reward_fns"]) == {"rewards.py:compute_score", "rewards.py:brevity"} and r["reward_errors"] == 0
        assert 0 < r["entropy"] < 10 and 0 < r["response_len_mean"] <= r["response_len_max"] <= 4
    # TensorBoard's own reader sees the same figures
    ev = EventAccumulator(str(out / "tensorboard"))
    ev.Reload()
    tags = ev.Tags()["scalars"]
    assert {"loss", "entropy", "reward_train", "time/rollout", "reward_fns/rewards.py:brevity"} <= set(tags)
    assert [e.step for e in ev.Scalars("loss")] == [1, 2]
    assert ev.Scalars("entropy")[-1].value == pytest.approx(steps[-1]["entropy"], rel=1e-6)

    export = tmp_path / "exported"
    assert main(["export-model", str(out), "--out", str(export)]) == 0
    info = json.loads((export / "mosearch_export.json").read_text())
    assert info["files_merged"] == 2 and info["step"] == 2
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "chat_template.jinja"} <= {p.name for p in export.iterdir()}
    hf = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    got, before = _logprobs(hf, samples), _logprobs(base, samples)
    flat = lambda x: torch.tensor([v for row in x for v in row])  # noqa: E731
    # fp32: TP sums the row-parallel halves in another order than one process does (~1e-6 here)
    torch.testing.assert_close(flat(got), flat(trained), rtol=0, atol=1e-4)
    assert (flat(before) - flat(trained)).abs().max() > 1e-3  # training moved them: agreeing is not trivial
    exported_tok = load_tokenizer(export)
    gen = hf.generate(torch.tensor([prompts[0]]), max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > len(prompts[0]) and exported_tok.chat_template == tok.chat_template

    # vLLM loads the directory: its log-probs of what it generates are the exported model's
    from trainer.rollout.vllm_engine import VLLMEngine

    engine = ray_local.remote(num_cpus=1)(VLLMEngine).remote(str(export), max_num_seqs=8, max_model_len=64, seed=0,
                                                             eos_id=tok.eos_token_id)
    try:
        res = ray_local.get(engine.generate.remote(prompts, n=2, max_new_tokens=4, temperature=1.0, seed=3))
    finally:
        ray_local.kill(engine)
    vs = [Sample(i, prompts[i // 2], c, lp, 0.0, 0.0, 0) for i, (c, lp) in enumerate(zip(res["completions"], res["logprobs"]))]
    assert sum(len(s.completion) for s in vs) > 0
    torch.testing.assert_close(flat(_logprobs(hf, vs)), flat([s.behav_logp for s in vs]), rtol=0, atol=1e-3)


def test_async_trl_jsonl_with_weighted_trl_rewards_from_the_cli(own, ray_local, tmp_path, capsys):
    plan = _variant(own, "async", {"rollout_gpus": 1, "train_gpus": 1, "shared_gpus": 0},
                    {"dp": 1, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 16},
                    {"mode": "async", "staleness_bound": 1, "pipeline_chunks": 1})
    out = tmp_path / "async"
    assert main(["train", "--plan", str(plan), "--task", str(own["trl"]), "--reward", f"{REWARDS}:accuracy",
                 "--reward", f"{REWARDS}:brevity", "--reward-weights", "1,0.5", "--steps", "3", "--out", str(out),
                 "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "4", "--eval-every", "0",
                 "--checkpoint-every", "3", "--backend", "hf", "--no-progress", "--logger", "wandb"]) == 0
    cap = capsys.readouterr()
    err = [x for x in cap.err.splitlines() if x.strip()]
    # predicted beside measured for the model that ran: the workload's directory, no mismatch note
    assert "predicted for this run's settings" in cap.out and "the run trained" not in cap.out
    # the workload's model, not tiny, and said first
    assert err[0] == f"training model {own['root'] / 'model'} (from the workload {own['root'] / 'workload.yaml'})"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"time"' in x]
    assert [r["step"] for r in rows] == [1, 2, 3] and max(r["staleness_max"] for r in rows) <= 1
    for r in rows:
        parts = r["reward_fns"]
        # the weighted sum of the two TRL rewards, batch means
        assert r["reward_train"] == pytest.approx(parts["rewards.py:accuracy"] + 0.5 * parts["rewards.py:brevity"],
                                                  abs=1e-9)
        assert parts["rewards.py:brevity"] < 0
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0  # wandb's offline record, for `wandb sync`
    assert json.loads((out / "checkpoints" / "step_000003" / "layout.json").read_text())["world"] == 1
