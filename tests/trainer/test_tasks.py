"""Built-in tasks, exact-match rewards, user tasks."""

import json
import sys

import pytest

from problems.errors import InputError
from trainer.rewards import exact_match
from trainer.tasks import PromptSampler, load_task


@pytest.mark.parametrize("name", ["arithmetic", "sorting", "counting"])
def test_builtin_answers_are_correct_and_splits_disjoint(name):
    task = load_task(name, seed=3, n_train=300, n_heldout=50)
    assert len(task.heldout) == 50 and len(task.train) > 100
    assert not set(ex.prompt for ex in task.train) & set(ex.prompt for ex in task.heldout)
    for prompt, answer in ((ex.prompt, ex.answer) for ex in task.train[:50]):
        if name == "arithmetic":
            assert str(eval(prompt.rstrip("="))) == answer
        elif name == "sorting":
            xs = prompt[len("sort "):-1].split()
            assert answer == " ".join(sorted(xs))
        else:
            _, letter, _, s = prompt.rstrip(":").split()
            assert answer == str(s.count(letter))
    assert load_task(name, seed=3, n_train=300, n_heldout=50).train == task.train  # deterministic by seed
    assert load_task(name, seed=4, n_train=300, n_heldout=50).train != task.train


def test_exact_match():
    assert exact_match("1+1=", " 2 ", "2") == 1.0
    assert exact_match("1+1=", "22", "2") == 0.0


def test_user_task_and_reward(tmp_path, monkeypatch):
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps({"prompt": f"say {i}:", "answer": str(i)}) for i in range(20)))
    mod = tmp_path / "myreward.py"
    mod.write_text("def score(prompt, completion, answer):\n    return 0.5 if answer in completion else 0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    task = load_task(f"jsonl:{f}", reward="myreward:score")
    assert len(task.train) + len(task.heldout) == 20
    ex = next(e for e in task.train if e.answer == "3")
    assert task.score([ex, ex], ["x3", "x4"]).rewards == [0.5, 0.0]
    sys.modules.pop("myreward", None)


def test_bad_user_task_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_task(f"jsonl:{tmp_path / 'nope.jsonl'}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": "b"}\nnot json\n')
    with pytest.raises(InputError, match="line 2"):
        load_task(f"jsonl:{bad}")
    with pytest.raises(InputError, match="module:function"):
        load_task("arithmetic", reward="nocolon")
    with pytest.raises(InputError, match="cannot import"):
        load_task("arithmetic", reward="no_such_module_xyz:f")
    with pytest.raises(InputError, match="unknown task"):
        load_task("poetry")


def test_sampler_resumes_exactly():
    a = PromptSampler(10, seed=1)
    first = a.take(7)
    b = PromptSampler(10, seed=1)
    b.load(a.state())
    assert a.take(9) == b.take(9)
    assert sorted(first + PromptSampler(10, 1).take(10)[7:]) == list(range(10))
