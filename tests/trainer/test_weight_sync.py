"""vLLM's log-probs after a weight sync equal the trainer's for the same tokens (fp32, CPU)."""

import pytest
import torch

from trainer.batch import Sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="session")
def vllm_engine(tiny_model, ray_local, local_calls):
    """ONE vLLM engine for the session, in a Ray actor as the trainer hosts it. (In-process it
    would share the test session's modules: vLLM's CPU kernel registration scans sys.modules
    and fails on llvmlite objects once numba, used by pymoo's AGE-MOEA-II, has been imported.)
    Compiled, as `mosearch train` runs it by default (the suite's other engines run eagerly)."""
    from trainer.models.tiny import load_tokenizer
    from trainer.rollout.vllm_engine import VLLMEngine

    actor = ray_local.remote(num_cpus=1)(VLLMEngine).remote(
        str(tiny_model), max_num_seqs=32, max_model_len=64, seed=0, eos_id=load_tokenizer(tiny_model).eos_token_id,
        cpu_eager_mode=False)
    yield local_calls(actor)
    ray_local.kill(actor)


def _samples(res, prompts, n):
    out = []
    for i, p in enumerate(prompts):
        for g in range(n):
            r = i * n + g
            out.append(Sample(r, p, res["completions"][r], res["logprobs"][r], float(g % 2), 0.0, res["version"]))
    return out


def test_logprobs_match_after_sync(vllm_engine, tiny_model):
    from trainer.models.tiny import load_tokenizer
    from trainer.workers import TrainWorker

    tok = load_tokenizer(tiny_model)
    prompts = [[tok.bos_token_id] + tok.encode(p, add_special_tokens=False) for p in ("12+7=", "3-1=", "40+40=")]
    worker = TrainWorker(str(tiny_model), 0, 1, 0, {"lr": 5e-3}, micro_batch=4, pad_id=tok.pad_token_id)
    vllm_engine.update_weights(worker.state_items(), 0)

    res = vllm_engine.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=1)
    before = _samples(res, prompts, 4)
    for s, lp in zip(before, worker.logprobs(before)):
        assert max(abs(a - b) for a, b in zip(s.behav_logp, lp)) <= 1e-3

    # One real update with non-zero advantages moves the weights.
    for s in before:
        s.advantage = 1.0 if s.sample_id % 2 else -1.0
    worker.accumulate(before, n_global=len(before), n_micro=3, last=True)
    worker.apply()
    moved = worker.logprobs(before)
    assert max(abs(a - b) for s, lp in zip(before, moved) for a, b in zip(s.behav_logp, lp)) > 1e-2

    vllm_engine.update_weights(worker.state_items(), 1)
    res = vllm_engine.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=2)
    after = _samples(res, prompts, 4)
    assert res["version"] == 1 and sum(len(s.completion) for s in after) > 0
    diffs = [abs(a - b) for s, lp in zip(after, worker.logprobs(after)) for a, b in zip(s.behav_logp, lp)]
    assert max(diffs) <= 1e-3
    assert all(torch.isfinite(torch.tensor(diffs)))
