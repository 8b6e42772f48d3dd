"""The execution modes' submit/collect strategies (trainer/modes.py), on stand-in worker groups:
what each mode sends, when gradients start, the staleness guard and the colocated switch."""

from types import SimpleNamespace

import pytest

from trainer import modes
from trainer.batch import Sample
from trainer.groups import Chunk
from trainer.timing import StepTimes


class FakeRollout:
    """Engines that finish chunks in submission order; chunk `redo` comes back once as lost."""

    def __init__(self, engines=2, versions=None, redo=None):
        self.actors = [object()] * engines
        self.sent, self.calls = [], []
        self.versions = versions or {}  # step -> behaviour version of its samples
        self.redo = redo

    def send(self, ch):
        ch.ref = (ch.step, ch.seed, len(self.sent))
        self.sent.append(ch)

    def next_chunk(self, pending):
        ref = next(iter(pending))
        ch = pending.pop(ref)
        if self.redo is not None and ch.seed == self.redo:
            self.redo = None
            self.send(ch)
            pending[ch.ref] = ch
            return ch, None
        return ch, {"version": self.versions.get(ch.step, ch.step), "gen_s": 0.5, "gen_tokens": 3,
                    "prompt_tokens": 2, "rss_gb": 1.0}

    def sleep(self):
        self.calls.append("sleep")

    def wake(self):
        self.calls.append("wake")

    def receive_weights(self, wait, die):
        self.calls.append(("sync", wait, tuple(sorted(die))))


class FakeTrain:
    def __init__(self):
        self.calls = []

    def accumulate(self, samples, n_global, last, micro_batch):
        self.calls.append(("accumulate", len(samples), n_global, last))
        return [f"ref{len(self.calls)}"]

    def apply(self, refs, lr):
        self.calls.append(("apply", tuple(refs), lr))
        return [{"busy_s": 1.0}]

    def update(self, samples, n_global, lr, mini_batches, group_size, micro_batch, computing):
        computing()
        self.calls.append(("update", len(samples), n_global, mini_batches))
        return [{"busy_s": 2.0}]

    def run(self, method, *args):
        self.calls.append(method)


def _mode(name, k=0, chunks=1, engines=2, prompts=4, steps=10, mini_batches=1, **rollout_kw):
    cfg = SimpleNamespace(prompts_per_step=prompts, group_size=2, steps=steps, mini_batches=mini_batches)
    rollout, train, injected = FakeRollout(engines, **rollout_kw), FakeTrain(), []

    def draw(step, n):
        return [Chunk(step, [step * 10 + c], [step * 10 + c], [[1]], seed=c) for c in range(n)]

    def score(ch, res):
        return [Sample(ch.draws[0] * 2 + g, [1], [2], [0.0], 1.0, 0.0, res["version"]) for g in range(2)]

    m = modes.make(name, rollout, train, cfg, k, chunks, 4, draw, score, lambda point, step: injected.append((point, step)))
    return m, rollout, train, injected


def test_the_plan_mode_names_pick_their_strategy():
    assert modes.MODES == ("colocated", "disaggregated", "async")
    assert [type(_mode(n)[0]).__name__ for n in modes.MODES] == ["Colocated", "Disaggregated", "Async"]
    with pytest.raises(KeyError):
        modes.make("eager", None, None, None, 0, 1, 1, None, None, None)


def test_colocated_sends_one_chunk_per_engine_and_trains_on_the_whole_batch():
    m, rollout, train, injected = _mode(modes.COLOCATED, chunks=3, engines=2)
    T = StepTimes()
    b = m.collect(0, m.submit(0), T)
    assert len(rollout.sent) == 2 and not b.refs  # not the plan's chunks: one per engine, nothing streamed
    assert train.calls == [] and len(b.samples) == 4 and b.gen_tokens == 6 and b.prompt_tokens == 8
    m.update(b, 0.1, 0)
    assert train.calls == [("update", 4, 8, 1)] and injected[-1] == ("gradients", 1)


def test_colocated_switch_hands_the_devices_over_in_order_and_is_timed():
    m, rollout, train, _ = _mode(modes.COLOCATED)
    T = StepTimes()
    m.switch(modes.TRAIN, T)
    m.switch(modes.ROLLOUT, T)
    assert rollout.calls == ["sleep", "wake"] and train.calls == ["onload", "offload"] and T.switch > 0


@pytest.mark.parametrize("name", [modes.DISAGGREGATED, modes.ASYNC])
def test_separate_devices_never_switch(name):
    m, rollout, train, _ = _mode(name)
    T = StepTimes()
    m.switch(modes.TRAIN, T)
    m.switch(modes.ROLLOUT, T)
    assert rollout.calls == [] and train.calls == [] and T.switch == 0.0


def test_disaggregated_streams_each_chunk_into_one_update():
    m, rollout, train, injected = _mode(modes.DISAGGREGATED, chunks=2, engines=1)
    b = m.collect(0, m.submit(0), StepTimes())
    assert len(rollout.sent) == 2  # the plan's pipeline_chunks, whatever the engine count
    # gradients start per chunk; only the last one is marked last; n_global is the whole step's
    assert train.calls == [("accumulate", 2, 8, False), ("accumulate", 2, 8, True)]
    assert injected == [("chunk", 1), ("chunk", 1)]
    m.update(b, 0.1, 0)
    assert injected[-1] == ("gradients", 1) and train.calls[-1] == ("apply", ("ref1", "ref2"), 0.1)
    m.sync(set())
    assert rollout.calls == [("sync", True, ())]


def test_several_updates_per_step_do_not_stream():
    m, _, train, _ = _mode(modes.DISAGGREGATED, chunks=2, mini_batches=2)
    b = m.collect(0, m.submit(0), StepTimes())
    assert not b.refs and train.calls == []
    m.update(b, 0.1, 0)
    assert train.calls == [("update", 4, 8, 2)]


def test_a_lost_engines_chunk_is_counted_as_redone_and_its_samples_kept_once():
    m, rollout, _, _ = _mode(modes.DISAGGREGATED, chunks=2, redo=0)
    b = m.collect(0, m.submit(0), StepTimes())
    assert b.redone == 1 and len(rollout.sent) == 3
    assert [x.sample_id for x in b.samples] == [0, 1, 2, 3]  # in draw order, once each


def test_async_keeps_k_plus_one_batches_in_flight_up_to_the_last_step():
    m, rollout, _, _ = _mode(modes.ASYNC, k=2, steps=4, engines=2)
    chunks = m.submit(0)
    assert {c.step for c in chunks} == {0} and [c.step for c in rollout.sent] == [0, 0, 1, 1, 2, 2]
    m.submit(1)
    assert [c.step for c in rollout.sent][-2:] == [3, 3]
    m.submit(2)
    m.submit(3)
    assert max(c.step for c in rollout.sent) == 3 and len(rollout.sent) == 8  # never past the last step
    m.sync({1})
    assert rollout.calls == [("sync", False, (1,))]  # not waited for


def test_async_reset_forgets_batches_drawn_ahead():
    m, rollout, _, _ = _mode(modes.ASYNC, k=1, steps=10)
    m.submit(0)
    assert len(m.ahead) == 1
    m.reset()
    chunks = m.submit(3)
    assert {c.step for c in chunks} == {3} and [c.step for c in m.ahead[0]] == [4, 4]


def test_async_drops_samples_older_than_k():
    def collect(behaviour):
        m, rollout, _, _ = _mode(modes.ASYNC, k=1, versions={5: behaviour}, engines=2)
        chunks = [Chunk(5, [c], [c], [[1]], seed=c) for c in range(2)]
        for ch in chunks:
            rollout.send(ch)
        return m.collect(5, chunks, StepTimes())

    b = collect(3)  # generated by version 3, trained at step 5: older than k = 1
    assert b.dropped == 4 and b.samples == []
    b = collect(4)
    assert b.dropped == 0 and len(b.samples) == 4
