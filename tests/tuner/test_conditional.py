"""Conditional search spaces: a choice whose options carry their own settings."""
import pickle

import pytest

from trainables.config import TrainConfig, training_settings
from tuner.config import parse
from tuner.schema import ExperimentError, scenarios
from tuner.searcher import FidelitySearcher, tpe_sampler
from tuner.space import SearchSpace

COND = """
name: cond
seed: 3
budget: {max_epochs: 3}
train: {dataset: digits, width: 0.25}
search:
  micro_batch_size: {type: choice, values: [32, 64]}
  optimizer:
    type: choice
    values: [sgd, adamw]
    branches:
      sgd:
        lr: {type: loguniform, low: 1.0e-2, high: 0.5}
        momentum: {type: uniform, low: 0.8, high: 0.95}
      adamw:
        lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2, q: 1.0e-4}
"""
SGD = {"lr[optimizer=sgd]", "momentum[optimizer=sgd]"}
ADAMW = {"lr[optimizer=adamw]"}


def test_each_branch_gets_its_own_parameter_names_and_scenario():
    exp = parse(COND)
    assert [p.name for p in exp.searched] == ["micro_batch_size", "optimizer", *sorted(SGD), *ADAMW]
    assert [p.at for p in exp.searched][2:] == ["search.optimizer.branches.sgd.lr",
                                                "search.optimizer.branches.sgd.momentum",
                                                "search.optimizer.branches.adamw.lr"]
    flats = {label: flat for flat, label in scenarios(exp.search)}
    assert set(flats) == {"optimizer=sgd", "optimizer=adamw"}
    assert flats["optimizer=adamw"]["lr"].high == 1e-2 and flats["optimizer=sgd"]["lr"].low == 1e-2
    assert "momentum" not in flats["optimizer=adamw"] and flats["optimizer=sgd"]["optimizer"].values == ["sgd"]


def test_every_problem_of_every_branch_is_reported_at_once_with_its_yaml_path():
    bad = """
name: bad
train: {dataset: digits, weight_decay: 0.01}
search:
  optimizer:
    type: choice
    values: [sgd, adamw]
    branches:
      sgdd: {lr: {type: loguniform, low: 0, high: 0.5}}
      adamw:
        optimizer: {type: choice, values: [sgd]}
        weight_decay: {type: uniform, low: 0.0, high: 0.1}
        micro_batch_size: {type: choice, values: [4096]}
        lr: {type: uniform, low: 0.1, high: 0.2, valuez: 3}
  momentum: {type: uniform, low: 0.5, high: 0.9, branches: {a: {}}}
"""
    with pytest.raises(ExperimentError) as e:
        parse(bad)
    text = str(e.value)
    for needle in [
        "search.optimizer.branches.sgdd: 'sgdd' is not one of the values ['sgd', 'adamw']",
        "did you mean 'sgd'?",
        "search.optimizer.branches.sgdd.lr.low: 0.0 must be > 0",
        "search.optimizer.branches.adamw.optimizer: 'optimizer' is searched inside a branch of its own choice",
        "search.optimizer.branches.adamw.weight_decay: 'weight_decay' is both fixed (train.weight_decay: 0.01)",
        "search.optimizer.branches.adamw.lr.valuez: unknown key; did you mean 'values'?",
        "search.momentum.branches: only a choice has branches",
        # the training rules, judged per branch: the batch only the adamw branch draws
        "global batch 4096", "micro_batch_size=4096",
    ]:
        assert needle in text, (needle, text)


def test_a_rule_broken_in_one_branch_only_names_that_branch():
    one = COND.replace("lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2, q: 1.0e-4}",
                       "lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}\n        momentum: {type: uniform, "
                       "low: 0.5, high: 1.5}")
    with pytest.raises(ExperimentError) as e:
        parse(one)
    problems = e.value.problems
    assert len(problems) == 1 and "momentum" in problems[0] and "optimizer='adamw'" in problems[0], problems


def _searcher(exp):
    return FidelitySearcher(space=SearchSpace(exp.search), metric="val_acc", mode="max",
                            sampler=tpe_sampler(exp.seed, n_startup_trials=4), max_epochs=3)


def _finish(s, tid, value):
    s.on_trial_result(tid, {"epoch": 1, "status": "ok", "val_acc": value / 2})
    s.on_trial_complete(tid, {"epoch": 3, "status": "ok", "val_acc": value})


def test_trials_draw_one_branch_each_and_train_with_plain_setting_names():
    exp = parse(COND)
    s = _searcher(exp)
    base = exp.base_config()
    seen = set()
    for i in range(24):
        cfg = s.suggest(f"t{i}")
        branch = SGD if cfg["optimizer"] == "sgd" else ADAMW
        other = ADAMW if branch is SGD else SGD
        assert branch <= set(cfg) and not other & set(cfg), cfg
        drawn = cfg[f"lr[optimizer={cfg['optimizer']}]"]
        # the adamw lr is rounded to its q (1e-4), within the range
        assert abs(cfg["lr"] - drawn) <= (0.5e-4 + 1e-12 if cfg["optimizer"] == "adamw" else 0.0), cfg
        if cfg["optimizer"] == "sgd":
            assert 1e-2 <= cfg["lr"] <= 0.5 and cfg["momentum"] == cfg["momentum[optimizer=sgd]"]
        else:
            assert 1e-4 <= cfg["lr"] <= 1e-2 and "momentum" not in cfg
            assert abs(cfg["lr"] / 1e-4 - round(cfg["lr"] / 1e-4)) < 1e-6, cfg["lr"]   # q: 1.0e-4
        settings = training_settings(cfg)
        assert not [k for k in settings if "[" in k]
        TrainConfig.from_dict({**base, **settings})          # what the trial hands to train_loop
        seen.add(cfg["optimizer"])
        # sgd trials score by their lr; adamw ones poorly, so TPE should come to prefer sgd
        _finish(s, f"t{i}", 0.9 - abs(cfg["lr"] - 0.1) if cfg["optimizer"] == "sgd" else 0.2)
    assert seen == {"sgd", "adamw"}
    study = s.study.trials
    for t in study:
        assert set(t.params) in ({"micro_batch_size", "optimizer"} | SGD, {"micro_batch_size", "optimizer"} | ADAMW)
    late = [t.params["optimizer"] for t in study[12:]]
    assert late.count("sgd") > len(late) / 2, late


def test_the_searcher_snapshot_pickles_and_restores_the_space(tmp_path):
    exp = parse(COND)
    s = _searcher(exp)
    for i in range(3):
        s.suggest(f"t{i}")
        _finish(s, f"t{i}", 0.5)
    s.save(str(tmp_path / "searcher.pkl"))
    restored = FidelitySearcher(metric="val_acc", mode="max", max_epochs=3)
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert isinstance(restored.space, SearchSpace)
    cfg = restored.suggest("t3")
    assert {"optimizer", "lr"} <= set(cfg) and len(restored.study.trials) == 4
    assert pickle.loads(pickle.dumps(SearchSpace(exp.search))).search == SearchSpace(exp.search).search


def test_a_space_with_branches_keeps_tpe_in_its_rung_model_and_one_without_takes_turns_with_a_gp():
    from tuner.searcher import RUNG_SAMPLER, make_searcher
    exp = parse(COND)
    budget = exp.budget.model_copy(update={"num_samples": 30})
    assert make_searcher(exp.search, "val_acc", "max", 0, budget).rung_sampler == "tpe"
    flat = {k: e for k, e in exp.search.items() if not e.branches}
    assert RUNG_SAMPLER == "mix" and make_searcher(flat, "val_acc", "max", 0, budget).rung_sampler == "mix"
