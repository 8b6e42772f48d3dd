"""Weight sync by collective broadcast (trainer/weight_sync.py): routes, the bucket format, vLLM's
log-probs after a broadcast (direct and staged, two emulated regions), and an engine dying mid-sync."""

import json
import threading

import pytest
import torch

from trainer import weight_sync as WS
from trainer.batch import Sample


# -- routes and the wire format (no Ray) ---------------------------------------------------------
def test_direct_route_is_one_group_from_rank_0_to_every_engine():
    (g,) = WS.route_groups("direct", ["eu", "eu", "us"], "us")
    assert g.members == [("worker", 0), ("engine", 0), ("engine", 1), ("engine", 2)] and g.cross_region


def test_staged_route_sends_one_copy_per_region_then_fans_out():
    groups = WS.route_groups("staged", ["eu", "us", "eu", "eu"], "us")
    assert [(g.name, g.members) for g in groups] == [
        ("staged:cross", [("worker", 0), ("engine", 0), ("engine", 1)]),  # one leader per region
        ("staged:fan:eu", [("engine", 0), ("engine", 2), ("engine", 3)]),  # the leader fans out
    ]
    # each engine receives on exactly one group, so it gets exactly one copy
    receivers = [m for g in groups for m in g.members[1:]]
    assert sorted(receivers) == [("engine", i) for i in range(4)]
    with pytest.raises(ValueError):
        WS.route_groups("carrier-pigeon", ["eu", "us"], "us")


def test_pack_unpack_round_trips_mixed_dtypes_at_aligned_offsets():
    items = [("a", torch.randn(3, 5)), ("b", torch.arange(7, dtype=torch.int64)),
             ("c", torch.randn(11).to(torch.bfloat16)), ("d", torch.randn(2, 3, 4).double())]
    meta, flat = WS.pack(items)
    assert all(o % WS.ALIGN == 0 for *_, o, _ in meta["tensors"])
    back = WS.unpack(json.loads(json.dumps(meta)), flat)
    assert [n for n, _ in back] == list("abcd")
    for (_, x), (_, y) in zip(items, back):
        assert x.dtype == y.dtype and torch.equal(x, y)


def _local_groups(specs_per_member):
    """Join in-process (one thread per member): gloo groups over loopback, as the actors do."""
    out, threads = {}, []
    for who, specs in specs_per_member.items():
        t = threading.Thread(target=lambda w=who, s=specs: out.__setitem__(w, WS.join(s)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    return out


def _spec(name, port, rank, size):
    return {"name": name, "host": "127.0.0.1", "port": port, "rank": rank, "size": size}


def test_buckets_stay_bounded_and_a_wrong_version_is_refused():
    """Sender -> leader -> follower (a staged fan-out) in threads: every tensor arrives intact, no
    bucket holds more than the bucket size (unless one tensor alone is bigger), and a receiver that
    expects another version takes nothing."""
    state = [(f"w{i}", torch.randn(100 + i)) for i in range(20)] + [("big", torch.randn(3000))]
    bucket = 2000  # bytes: several tensors of ~400 bytes per bucket; 'big' (12 kB) alone
    buckets = list(WS.buckets(iter(state), bucket))  # as TrainWorker.iter_full_state cuts them
    assert [n for b in buckets for n, _ in b] == [n for n, _ in state]
    assert all(sum(t.numel() * 4 for _, t in b) <= bucket or len(b) == 1 for b in buckets) and len(buckets) > 3

    for expected_version, ok in ((7, True), (6, False)):
        p1, p2 = WS.free_address()[1], WS.free_address()[1]
        m = _local_groups({"src": [_spec("cross", p1, 0, 2)],
                           "lead": [_spec("cross", p1, 1, 2), _spec("fan", p2, 0, 2)],
                           "follow": [_spec("fan", p2, 1, 2)]})
        got, stats = {}, {}

        def recv(who):
            rx = WS.Receiver(m[who], expected_version, torch.device("cpu"))
            got[who] = [(n, t.clone()) for n, t in rx.stream()]
            stats[who] = rx.st

        threads = [threading.Thread(target=recv, args=(w,)) for w in ("lead", "follow")]
        for t in threads:
            t.start()
        sent = WS.send(m["src"], 7, iter(buckets), torch.device("cpu"))
        for t in threads:
            t.join(60)
        for member in m.values():
            member.close()
        if ok:
            assert sent["error"] is None and sent["buckets"] == len(buckets)
            for who in ("lead", "follow"):
                assert [n for n, _ in got[who]] == [n for n, _ in state]
                assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got[who], state))
                assert stats[who]["buckets"] == len(buckets) and stats[who]["error"] is None
        else:
            assert got["lead"] == [] and "expected v6" in stats["lead"]["error"]


def _handover(state, bucket, keys):
    """Sender -> leader -> follower with `share` asked on both groups; `keys` gives each member's
    device key (same key: memory both can map). Returns (sent stats, received tensors, stats)."""
    import os

    p1, p2 = WS.free_address()[1], WS.free_address()[1]
    share = lambda spec: {**spec, "share": True}  # noqa: E731
    real = WS.device_key
    WS.device_key = lambda: keys[threading.current_thread().name]
    try:
        threads, m = [], {}
        for who, specs in {"src": [share(_spec("cross", p1, 0, 2))],
                           "lead": [share(_spec("cross", p1, 1, 2)), share(_spec("fan", p2, 0, 2))],
                           "follow": [share(_spec("fan", p2, 1, 2))]}.items():
            t = threading.Thread(target=lambda w=who, s=specs: m.__setitem__(w, WS.join(s)), name=who)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(60)
    finally:
        WS.device_key = real
    got, stats = {}, {}

    def recv(who):
        rx = WS.Receiver(m[who], 3, torch.device("cpu"))
        got[who] = [(n, t.clone()) for n, t in rx.stream()]
        stats[who] = rx.st

    before = set(os.listdir(WS._shm_dir()))
    threads = [threading.Thread(target=recv, args=(w,)) for w in ("lead", "follow")]
    for t in threads:
        t.start()
    sent = WS.send(m["src"], 3, iter(list(WS.buckets(iter(state), bucket))), torch.device("cpu"))
    for t in threads:
        t.join(60)
    for member in m.values():
        member.close()
    leftover = {f for f in set(os.listdir(WS._shm_dir())) - before if f.startswith("mosearch-sync-")}
    return sent, got, stats, leftover


def test_colocated_members_take_a_shared_memory_handover_others_get_bytes():
    """A group whose members all report one device key carries handles to shared memory, not the
    weights (no byte of payload on the wire, every bucket freed after the barrier); a group with a
    member elsewhere carries bytes though sharing was asked for. The data arrives intact either way,
    and a leader that received a hand-over forwards bytes."""
    state = [(f"w{i}", torch.randn(50 + i)) for i in range(12)] + [("big", torch.randn(2000))]
    for keys, shared_groups in (({"src": "a", "lead": "a", "follow": "a"}, {"cross", "fan"}),
                                ({"src": "a", "lead": "a", "follow": "b"}, {"cross"}),
                                ({"src": "a", "lead": "b", "follow": "b"}, {"fan"}),
                                ({"src": "a", "lead": "b", "follow": "c"}, set())):
        sent, got, stats, leftover = _handover(state, 1000, keys)
        assert sent["error"] is None and sent["buckets"] > 3 and not leftover
        for who in ("lead", "follow"):
            assert [n for n, _ in got[who]] == [n for n, _ in state], keys
            assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got[who], state))
            assert stats[who]["error"] is None
        if "cross" in shared_groups:
            assert sent["transport"] == "shared_memory" and sent["bytes"] == 0
            assert sent["shared_bytes"] == stats["lead"]["bytes"] >= sum(t.numel() * 4 for _, t in state)
            assert stats["lead"]["transport"] == "shared_memory"
        else:
            assert sent["transport"] == "bytes" and sent["bytes"] == stats["lead"]["bytes"] and sent["shared_bytes"] == 0
        assert stats["follow"].get("transport", "bytes") == ("shared_memory" if "fan" in shared_groups else "bytes")
        # the leader forwards bytes when its fan-out group cannot share (whatever it received), none when it can
        fan_bytes = 0 if "fan" in shared_groups else stats["follow"]["bytes"]
        assert stats["lead"]["forwarded_bytes"] == fan_bytes and (fan_bytes > 0) == ("fan" not in shared_groups)


# -- vLLM engines on Ray: log-probs after a broadcast ------------------------------------------------
@pytest.fixture(scope="module")
def two_engines(tiny_model, ray_local):
    from trainer.models.tiny import load_tokenizer
    from trainer.rollout.vllm_engine import VLLMEngine

    eos = load_tokenizer(tiny_model).eos_token_id
    # no logical CPU: while this module's engines live, the driver tests below still get their bundles
    # (2 CPUs each) from the session's 8, beside the session's vllm_engine
    actors = [ray_local.remote(num_cpus=0)(VLLMEngine).remote(str(tiny_model), max_num_seqs=32, max_model_len=64,
                                                               seed=i, eos_id=eos) for i in range(2)]
    yield actors
    for a in actors:
        ray_local.kill(a)


def _samples(res, prompts, n):
    return [Sample(i * n + g, p, res["completions"][i * n + g], res["logprobs"][i * n + g], 0.0, 0.0, res["version"])
            for i, p in enumerate(prompts) for g in range(n)]


@pytest.mark.integration
@pytest.mark.slow
def test_vllm_logprobs_equal_the_trainers_after_a_broadcast_direct_and_staged(two_engines, tiny_model, ray_local,
                                                                             local_calls):
    """A replicated trainer (a Ray actor, as the driver hosts it) trains one step, then broadcasts to
    two vLLM engines in region 'eu' while it sits in 'us': direct (two copies leave the trainer) and
    staged (one copy crosses, the leader fans out). vLLM's log-probs then equal the trainer's
    within 1e-5 (fp32) on both engines."""
    from trainer.models.tiny import load_tokenizer
    from trainer.workers import TrainWorker

    tok = load_tokenizer(tiny_model)
    actor = ray_local.remote(num_cpus=1)(TrainWorker).remote(str(tiny_model), 0, 1, 0, {"lr": 5e-3}, 4,
                                                              pad_id=tok.pad_token_id)
    worker, engines = local_calls(actor), [local_calls(a) for a in two_engines]
    prompts = [[tok.bos_token_id] + tok.encode(p, add_special_tokens=False) for p in ("12+7=", "3-1=", "40+40=")]
    batch = _samples(engines[0].generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=1), prompts, 4)
    for s in batch:
        s.advantage = 1.0 if s.sample_id % 2 else -1.0
    worker.accumulate(batch, n_global=len(batch), n_micro=2, last=True)
    worker.apply()

    for version, route, share in ((1, "direct", False), (2, "staged", False), (3, "direct", True)):
        groups = WS.route_groups(route, ["eu", "eu"], "us")
        ray_local.get(WS.connect(groups, [actor], two_engines, share=share), timeout=120)
        recv = [e.receive_weights.remote(version) for e in two_engines]
        sent = worker.broadcast_weights(version, 64 << 10)  # 64 KiB buckets: the 2 MB model in many
        got = ray_local.get(recv, timeout=120)
        assert sent["error"] is None and all(g["error"] is None for g in got)
        assert sent["buckets"] > 10 and all(g["buckets"] == sent["buckets"] for g in got)
        body = got[0]["bytes"]
        if share:  # colocated on one host: the engines map the trainer's buckets, no payload on the wire
            assert sent["transport"] == "shared_memory" and sent["bytes"] == 0 and sent["shared_bytes"] == body
            assert all(g["transport"] == "shared_memory" for g in got)
        else:
            # direct: the trainer sends each engine its copy; staged: one copy leaves it, engine 0 forwards
            assert sent["transport"] == "bytes" and sent["bytes"] == (2 * body if route == "direct" else body)
            assert got[0]["forwarded_bytes"] == (body if route == "staged" else 0) and got[1]["forwarded_bytes"] == 0
        for i, e in enumerate(engines):
            res = e.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=10 + version)
            after = _samples(res, prompts, 4)
            assert res["version"] == version and sum(len(s.completion) for s in after) > 0
            diffs = [abs(a - b) for s, lp in zip(after, worker.logprobs(after)) for a, b in zip(s.behav_logp, lp)]
            assert max(diffs) <= 1e-5, (route, i, max(diffs))
        worker.sync_close()
        for e in engines:
            e.sync_close()
        # the next version moves the weights again, so the staged check is not a leftover of the direct one
        worker.accumulate(batch, n_global=len(batch), n_micro=2, last=True)
        worker.apply()
    ray_local.kill(actor)


# -- the driver: an engine dying mid-sync -------------------------------------------------------------
@pytest.mark.integration
def test_engine_dying_mid_sync_is_restarted_and_gets_the_current_version(ray_local, plan_file, tmp_path, monkeypatch):
    """Engine 1 SIGKILLs itself after the first bucket of step 2's sync (small buckets: the sync is
    still going). The driver restarts it, rebuilds the groups and re-broadcasts that version to
    every engine; the next step's behaviour log-probs equal the trainer's (transformers backend:
    what is tested is the driver's recovery)."""
    from trainer.driver import RunConfig, run

    pool = {"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": 2, "train_gpus": 1,
            "shared_gpus": 0, "rollout_tp": 1}
    plan = plan_file(pools=[pool], execution={"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 2})
    monkeypatch.setenv("MOSEARCH_INJECT_FAULTS", "sync@2:1")
    monkeypatch.setenv("MOSEARCH_LOCAL_DEVICES", "3")
    out = tmp_path / "sync-fault"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=3, prompts_per_step=8, group_size=4, max_new_tokens=4,
                    eval_every=0, checkpoint_every=0, backend="hf", progress=False, lr=1e-2, sync_bucket_mb=0.25)
    logs = []
    summary = run(cfg, log=logs.append)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time" in r]
    assert summary["status"] == "finished" and [r["step"] for r in rows] == [1, 2, 3]
    assert any("engine 1 dies in the weight sync of step 2" in m for m in logs)
    assert rows[1]["faults"] == [{"lost": "engine", "index": 1, "version": 2}]
    assert all(r["sync"]["path"] == "broadcast" and r["sync"]["version"] == r["version"] for r in rows)
    assert all(r["sync"]["buckets"] > 2 for r in rows)  # 2 MB in 0.25 MiB buckets: it died mid-sync
    assert summary["layout"]["weight_sync"]["fallbacks"] == 0
    # step 3 was generated by both engines (the restarted one included) with the trainer's weights
    assert rows[2]["behav_abs_diff_mean"] < 1e-5 and rows[2]["staleness_max"] == 0


@pytest.mark.integration
@pytest.mark.slow
def test_vllm_logprobs_equal_a_zero3_dp2_trainers_after_a_broadcast(two_engines, tiny_model, ray_local, local_calls):
    """Two ranks with FSDP2-sharded parameters train a step; both gather (full_tensor, a collective)
    bucket by bucket while rank 0 broadcasts to a vLLM engine; vLLM's log-probs equal the trainer's
    within 1e-5 (fp32)."""
    from trainer.weight_sync import free_port
    from trainer.models.tiny import load_tokenizer
    from trainer.workers import TrainWorker

    tok = load_tokenizer(tiny_model)
    cls = ray_local.remote(num_cpus=1)(TrainWorker)
    port = free_port()
    ranks = [cls.remote(str(tiny_model), r, 2, port, {"lr": 5e-3}, 4, "zero3", pad_id=tok.pad_token_id)
             for r in range(2)]
    # FSDP2 on the CPU mesh: each rank holds DTensor shards, so iter_full_state really gathers
    assert all(n > 0 for n in ray_local.get([r.__ray_call__.remote(
        lambda self: sum(type(p).__name__ == "DTensor" for p in self.module.parameters())) for r in ranks], timeout=300))
    engine = local_calls(two_engines[0])
    prompts = [[tok.bos_token_id] + tok.encode(p, add_special_tokens=False) for p in ("5+5=", "9-3=", "21+1=")]
    batch = _samples(engine.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=3), prompts, 4)
    for s in batch:
        s.advantage = 1.0 if s.sample_id % 2 else -1.0
    ray_local.get([r.accumulate.remote(batch[i::2], len(batch), 2, True) for i, r in enumerate(ranks)])
    ray_local.get([r.apply.remote() for r in ranks])

    ray_local.get(WS.connect(WS.route_groups("direct", ["eu"], "us"), ranks, two_engines[:1]), timeout=120)
    recv = two_engines[0].receive_weights.remote(7)
    sent = ray_local.get([r.broadcast_weights.remote(7, 64 << 10) for r in ranks], timeout=300)
    got = ray_local.get(recv, timeout=300)
    assert got["error"] is None and sent[0]["error"] is None and got["buckets"] == sent[0]["buckets"] > 10
    assert sent[1]["bytes"] == 0  # rank 1 only took part in the gathers
    res = engine.generate(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=4)
    after = _samples(res, prompts, 4)
    assert res["version"] == 7
    lps = ray_local.get([r.logprobs.remote(after) for r in ranks], timeout=300)  # a collective: both ranks
    diffs = [abs(a - b) for s, lp in zip(after, lps[0]) for a, b in zip(s.behav_logp, lp)]
    assert max(diffs) <= 1e-5, max(diffs)
    engine.sync_close()
    for r in ranks:
        ray_local.kill(r)


@pytest.mark.integration
def test_staged_route_on_two_emulated_regions_through_the_driver(ray_local, plan_file, tmp_path, monkeypatch):
    """The rank in 'west', two engines in 'east': the driver builds the staged route (one copy crosses
    to the east leader, which fans out to its neighbour), every step syncs over it, and every engine
    generates with the trainer's weights (transformers backend, fp32)."""
    from trainer.driver import Driver, RunConfig

    pools = [{"pool": "cpu-local@east", "gpu": "cpu-local", "region": "east", "rollout_gpus": 2, "train_gpus": 0,
              "shared_gpus": 0, "rollout_tp": 1},
             {"pool": "cpu-local@west", "gpu": "cpu-local", "region": "west", "rollout_gpus": 0, "train_gpus": 1,
              "shared_gpus": 0, "rollout_tp": 1}]
    plan = plan_file(pools=pools, weight_sync={"route": "staged"},
                     execution={"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 2})
    monkeypatch.setenv("MOSEARCH_LOCAL_DEVICES", "3")
    out = tmp_path / "staged"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=2, prompts_per_step=6, group_size=4, max_new_tokens=4,
                    eval_every=0, checkpoint_every=0, backend="hf", progress=False, lr=1e-2, sync_bucket_mb=0.25)
    driver = Driver(cfg)
    try:
        driver.setup()
        assert [(g.name, g.members, g.cross_region) for g in driver.rollout.sync_groups] == [
            ("staged:cross", [("worker", 0), ("engine", 0)], True),
            ("staged:fan:east", [("engine", 0), ("engine", 1)], False)]
        summary = driver.fit()
    finally:
        driver.shutdown()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time" in r]
    assert summary["layout"]["weight_sync"]["route"] == "staged" and summary["layout"]["weight_sync"]["fallbacks"] == 0
    for r in rows:
        # one copy crosses to the other region (direct would send two)
        assert r["sync"]["path"] == "broadcast" and r["sync"]["bytes_sent"] == r["sync"]["copy_bytes"]
    assert rows[1]["behav_abs_diff_mean"] < 1e-5  # step 2 ran on both engines after a staged sync
    assert set(summary["measured"]) >= {"sync_gather_s", "sync_transfer_s", "sync_load_s"}


@pytest.mark.integration
def test_the_object_store_path_is_said_in_the_summary(ray_local, plan_file, tmp_path, capsys):
    """The fallback, chosen: every row says object_store, the summary's notes say it in one line, and
    the engines still generate with the trainer's weights."""
    from mosearch.cli import main

    out = tmp_path / "objstore"
    assert main(["train", "--plan", str(plan_file()), "--steps", "2", "--out", str(out), "--backend", "hf",
                 "--weight-sync", "object_store", "--prompts-per-step", "4", "--group-size", "2",
                 "--max-new-tokens", "4", "--eval-every", "0", "--checkpoint-every", "0", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    rows = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "time" in r]
    note = "weight sync: object store, not the planned broadcast (asked for: weight_sync=object_store)"
    assert summary["layout"]["notes"] == [note] and f"note: {note}" in printed
    assert summary["layout"]["weight_sync"]["path"] == "object_store"
    assert all(r["sync"] == {"path": "object_store", "version": r["version"]} for r in rows)
    assert rows[1]["behav_abs_diff_mean"] < 1e-5
