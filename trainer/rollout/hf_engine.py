"""A transformers `generate` backend with the vLLM engine's interface: for fast unit tests only."""

from __future__ import annotations

import time

import torch

from trainer import weight_sync as WS
from trainer.rollout.common import result, rss_gb


class HFEngine(WS.SyncEndpoint):
    def __init__(self, model_path: str, seed: int = 0, eos_id: int | None = None, pad_id: int = 0, **_ignored):
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.eos_id, self.pad_id = eos_id, pad_id
        self.version = 0
        self.tp = 1
        self.asleep = False

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float = 1.0,
                 seed: int | None = None) -> dict:
        if self.asleep:  # as on GPU, where a sleeping engine has released its weights
            raise RuntimeError("generate called on a sleeping engine (wake_up first)")
        t0, version = time.perf_counter(), self.version
        if seed is not None:
            torch.manual_seed(seed)
        rows = [p for p in prompts for _ in range(n)]
        width = max(len(p) for p in rows)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in rows])
        attn = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in rows])[:, None]).long()
        greedy = temperature <= 0
        out = self.model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                                  do_sample=not greedy, temperature=None if greedy else temperature, top_k=0 if not greedy else None,
                                  top_p=None, eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                  output_scores=True, return_dict_in_generate=True)
        gen = out.sequences[:, width:]
        # Behaviour log-probs of the sampled tokens under the (temperature-scaled) sampling distribution.
        logp = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], dim=1) if out.scores else None
        comps, lps = [], []
        for r in range(gen.shape[0]):
            toks = gen[r].tolist()
            if self.eos_id in toks:
                toks = toks[: toks.index(self.eos_id) + 1]
            comps.append(toks)
            lps.append([logp[r, i, t].item() for i, t in enumerate(toks)])
        return result(version, comps, lps, time.perf_counter() - t0, sum(len(p) for p in prompts))

    def update_weights(self, items: list, version: int) -> float:
        t0 = time.perf_counter()
        self.model.load_state_dict(dict(items))
        self.version = version
        return time.perf_counter() - t0

    def sync_capable(self) -> bool:
        return True

    @torch.no_grad()
    def receive_weights(self, version: int, die_after_buckets: int | None = None) -> dict:
        rx = WS.Receiver(self._sync, version, torch.device("cpu"), die_after_buckets)
        params = self.model.state_dict()
        t0 = time.perf_counter()
        for name, t in rx.stream():
            params[name].copy_(t)
        st = rx.st | {"load_s": time.perf_counter() - t0 - rx.st["transfer_s"] - rx.st["forward_s"]}
        if st["error"] is None:
            self.version = version
        return st

    def sleep(self) -> float:
        self.asleep = True  # nothing to release on CPU; the flag keeps the driver's phases honest
        return 0.0

    def wake_up(self) -> float:
        self.asleep = False
        return 0.0

    def get_version(self) -> int:
        return self.version

    def tp_workers(self) -> int:
        return 1  # transformers generate: one process, no tensor parallelism

    def memory(self) -> dict:
        return {"rollout_rss_gb": rss_gb()}
