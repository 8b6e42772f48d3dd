"""The model's weight sync as the trainer runs it: the route, then the engines' load and a fixed cost."""

import numpy as np
import pytest

from problems.placement.calibration import _line
from problems.placement.model.comm import engine_sync_s, sync_broadcasts, sync_copies


def test_unprofiled_engines_leave_the_route_time_unchanged():
    route = np.array([0.5, 2.0])
    engines = np.array([[1, 0], [0, 3]])
    assert np.array_equal(engine_sync_s(route, 1e9, engines, np.array([1.0, 3.0]), np.zeros(2), np.zeros(2),
                                        np.zeros(2), np.zeros(2)), route)


def test_copies_are_sent_one_after_the_other_and_the_engines_load_once_per_sync():
    route = np.array([0.5, 0.5, 0.5])
    engines = np.array([[1, 0], [0, 1], [1, 1]])
    load_gbs = np.array([1.0, 4.0])  # the rest of a sync: 1 GB at 1 GB/s takes 1 s, at 4 GB/s 0.25 s
    over = np.array([0.1, 0.3])
    send = np.array([2.0, 2.0])  # one copy of 1 GB broadcast in 0.5 s
    lat = np.array([0.01, 0.01])  # per broadcast: 1 GB = two 512 MiB buckets, header + body each, end marker: 5
    t = engine_sync_s(route, 1e9, engines, np.array([1.0, 1.0, 2.0]), load_gbs, over, send, lat)
    one = 0.5 + 5 * 0.01
    # plan 3 sends two copies (slower than the route), then its slower pool reloads once
    assert t == pytest.approx([max(0.5, one) + 1.0 + 0.1, max(0.5, one) + 0.25 + 0.3, 2 * one + 1.0 + 0.1])
    # no broadcast rate measured: the route bounds the transfer
    assert engine_sync_s(route, 1e9, engines, np.array([1.0, 1.0, 2.0]), load_gbs, over) == pytest.approx(
        [0.5 + 1.1, 0.5 + 0.55, 0.5 + 1.1])


def test_buckets_of_512_mib_each_take_a_header_and_a_body():
    assert sync_broadcasts(1e6) == 3.0
    assert sync_broadcasts(float(512 << 20)) == 3.0
    assert sync_broadcasts(float(512 << 20) + 1) == 5.0


def test_engines_reload_at_once_and_the_source_packs_once():
    route = np.array([0.0, 0.0])
    engines = np.array([[2], [1]])
    args = (np.array([1.0]), np.array([0.1]))  # reload 1 GB in 1 s + 0.1 s per engine
    own = engine_sync_s(route, 1e9, engines, np.array([2.0, 1.0]), *args)
    packed = engine_sync_s(route, 1e9, engines, np.array([2.0, 1.0]), *args, pack_bw=np.array([8e9]))
    assert own == pytest.approx([1.1, 1.1])  # each engine on its own device: at once
    # packing moves 4 bytes per weight byte at 8 GB/s (0.5 s), once whatever the engines
    assert packed == pytest.approx([0.5 + 1.1, 0.5 + 1.1])


def test_the_sync_fit_takes_the_measured_broadcast_and_packing_out_before_fitting_the_rest():
    from problems.placement.calibration import fit
    from tests.calibration.test_fit_and_profiles import HIDDEN, KV_TOKEN, LAYERS, PARAMS, TRUE, WEIGHTS, synthetic_measurements

    m = synthetic_measurements()
    lat = 1e-3
    m["collective"] = [{"op": "broadcast", "bytes": 4096, "world": 2, "seconds": lat},
                       {"op": "broadcast", "bytes": 1 << 25, "world": 2, "seconds": (1 << 25) / 2e9}]
    mem = TRUE["bw_tbs"] * 1e12
    # truth: packing (4 bytes per byte through memory), 2 copies at 2 GB/s + 3 latencies each, then
    # two engines reloading at once, each 0.05 s + bytes / 0.5 GB/s
    m["weight_sync"] = [{"bytes": b, "copies": 2,
                         "seconds": 4 * b / mem + 2 * (b / 2e9 + 3 * lat) + (0.05 + b / 0.5e9)} for b in (2e6, 2e8)]
    f = fit(m, PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    assert f.bcast_gbs == pytest.approx(2.0) and f.p2p_latency_s == pytest.approx(lat)
    assert f.sync_overhead_s == pytest.approx(0.05) and f.sync_gbs == pytest.approx(0.5)


def test_copies_follow_the_route():
    engines = np.array([[2, 1, 0], [3, 0, 1], [1, 0, 0]])  # pools 0 and 2 in region 0, pool 1 in region 1
    region = np.array([0, 1, 0])
    assert sync_copies(engines, region, np.array([False] * 3), 2).tolist() == [3, 4, 1]
    # staged: one copy per region, then the biggest region's leader fans out (row 0: 2 + 1; row 1: the
    # source sends 1 to region 0's leader, which forwards 3): as many as direct, on fewer slow links
    assert sync_copies(engines, region, np.array([True] * 3), 2).tolist() == [3, 4, 1]
    two = np.array([[2, 2, 0]])  # 2 engines in each region: 2 crossing copies + 1 forward
    assert sync_copies(two, region, np.array([True]), 2).tolist() == [3] and \
        sync_copies(two, region, np.array([False]), 2).tolist() == [4]


def test_two_model_sizes_give_a_fixed_cost_and_a_rate():
    a, b = _line([2e6, 2e8], [0.05 + 2e6 / 0.2e9, 0.05 + 2e8 / 0.2e9])  # calibration.fit's rule
    assert a == pytest.approx(0.05) and 1 / b / 1e9 == pytest.approx(0.2)


def test_a_colocated_handover_packs_once_and_sends_no_payload():
    # 1 GB of weights (2 buckets of 512 MiB), 2 engines reloading at once, 1 ms latency, 10 GB/s packing,
    # reload 0.5 GB/s + 0.05 s each: hand-over = 2 bytes per byte packed + per bucket 2 broadcasts and a
    # barrier (2 latencies), then the end marker: 2 x 4 + 1 latencies, + the reload
    b, lat, mem = 1e9, 1e-3, 10e9
    args = (np.array([0.0]), b, np.array([[2.0]]), np.array([2.0]), np.array([0.5]), np.array([0.05]),
            np.array([2.0]), np.array([lat]), np.array([mem]))
    handed = engine_sync_s(*args, handover=np.array([True]))
    sent = engine_sync_s(*args, handover=np.array([False]))
    assert handed[0] == pytest.approx(2 * b / mem + 9 * lat + (b / 0.5e9 + 0.05))
    # the broadcast instead packs and frames (4 bytes per byte) and sends two copies at 2 GB/s
    assert sent[0] == pytest.approx(4 * b / mem + 2 * (b / 2e9 + 5 * lat) + (b / 0.5e9 + 0.05))


def test_a_cut_or_sharded_trainer_gathers_tensor_by_tensor_before_the_sync():
    from problems.placement.model.comm import sync_gather_s

    W, T, S = 8e9, 27, 20  # bytes; the state's tensors; those TP shards
    tp, pp, dp = np.array([1, 2, 1, 1, 2]), np.array([1, 1, 2, 1, 1]), np.array([2, 1, 1, 2, 2])
    sharded = np.array([False, False, False, True, True])
    op_tp, op_fsdp, lat, p2p, bw = 1e-3, 2e-3, 1e-4, 3e-4, 100e9
    t = sync_gather_s(W, T, S, tp, pp, dp, sharded, op_tp, op_fsdp, lat, p2p, bw)
    gather_tp = S * (op_tp + lat) + W / 2 / bw  # an all-gather per sharded tensor over 2 ranks
    gather_dp = T * (op_fsdp + lat) + W / 2 / bw  # every tensor an all-gather over dp 2
    assert t == pytest.approx([0.0,  # replicated: the source holds the weights
                               gather_tp,
                               T * p2p + W / 2 / bw,  # pp 2: each tensor broadcast from its stage
                               gather_dp,
                               gather_tp + T * (op_fsdp + lat) + W / 2 / 2 / bw])  # zero3 over tp shards


def test_the_state_tensor_count_is_the_hf_state_dicts():
    # the trainer's sync sends the HF state dict tensor by tensor (tied LM head included)
    transformers = pytest.importorskip("transformers")
    from problems.placement.catalog import model_presets

    arch = model_presets()["tiny"]
    cfg = transformers.Qwen2Config(num_hidden_layers=arch.layers, hidden_size=arch.hidden,
                                   num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads,
                                   intermediate_size=arch.ffn, vocab_size=arch.vocab,
                                   tie_word_embeddings=arch.tied_embeddings, head_dim=arch.hd)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    names = list(model.state_dict())
    assert arch.state_tensors == len(names) + (1 if "lm_head.weight" not in names else 0)
    sharded = [n for n in names if any(k in n for k in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                          "up_proj", "down_proj"))]
    assert arch.tp_sharded_tensors == len(sharded)
