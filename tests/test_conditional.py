"""Conditional search spaces: a choice whose options carry their own settings."""
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainables.config import TrainConfig, training_settings
from tuner.config import ExperimentError, parse, scenarios
from tuner.searcher import FidelityOptunaSearch, tpe_sampler
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
    flats = dict((label, flat) for flat, label in scenarios(exp.search))
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
    return FidelityOptunaSearch(space=SearchSpace(exp.search), metric="val_acc", mode="max",
                                sampler=tpe_sampler(exp.seed, n_startup_trials=4), max_epochs=3)


def _finish(s, tid, value):
    s.on_trial_result(tid, {"epoch": 1, "status": "ok", "val_acc": value / 2})
    s.on_trial_complete(tid, {"epoch": 3, "status": "ok", "val_acc": value})


def test_trials_draw_one_branch_each_and_train_with_plain_setting_names():
    exp = parse(COND)
    s = _searcher(exp)
    assert s.study.sampler._group is True
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
    restored = FidelityOptunaSearch(metric="val_acc", mode="max", max_epochs=3)
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert isinstance(restored._space, SearchSpace)
    cfg = restored.suggest("t3")
    assert {"optimizer", "lr"} <= set(cfg) and len(restored.study.trials) == 4
    assert pickle.loads(pickle.dumps(SearchSpace(exp.search))).search == SearchSpace(exp.search).search


RUN = """
name: condrun
storage_path: {tmp}/runs
seed: 1
budget: {{num_samples: 3, max_epochs: 3, grace_epochs: 3, max_concurrent_trials: 1}}
train: {{dataset: digits, cache_dir: {tmp}/cache, width: 0.25, flip: false, crop_padding: 1, max_steps_per_epoch: 4,
         fault_dir: {tmp}/faults}}
search:
  optimizer:
    type: choice
    values: [sgd, adamw]
    branches:
      sgd: {{lr: {{type: loguniform, low: 1.0e-2, high: 0.3}}}}
      adamw: {{lr: {{type: loguniform, low: 1.0e-4, high: 1.0e-2}}}}
"""


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.integration
@pytest.mark.timeout(500)
def test_a_conditional_study_resumes_and_status_and_export_show_the_branch(ray_address, tmp_path):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "hold").write_text("2")          # every trial waits before epoch 2
    spec = tmp_path / "cond.yaml"
    spec.write_text(RUN.format(tmp=tmp_path))
    exp_dir = tmp_path / "runs" / "condrun"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", ray_address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while not list(exp_dir.glob("*/result.json")) or not any(
                f.read_text().strip() for f in exp_dir.glob("*/result.json")):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:] if proc.poll() else ""
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out[-3000:]
    (tmp_path / "faults" / "hold").unlink()
    r = _cli("resume", str(exp_dir), "--address", ray_address, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    import optuna
    from tuner.searcher import JOURNAL, journal_storage
    study = optuna.load_study(study_name="condrun", storage=journal_storage(exp_dir / JOURNAL))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3, [(t.number, t.state, t.params) for t in study.trials]
    for t in done:   # one branch's parameters each, by their qualified names
        assert set(t.params) == {"optimizer", f"lr[optimizer={t.params['optimizer']}]"}, t.params
    s = _cli("status", str(exp_dir))
    assert s.returncode == 0 and s.stdout.count("TERMINATED") == 3, s.stdout
    assert "lr[optimizer=" in s.stdout, s.stdout
    e = _cli("export", str(exp_dir), "--out", str(tmp_path / "best"))
    assert e.returncode == 0, e.stdout + e.stderr
    head = (tmp_path / "best" / "best_config.yaml").read_text().splitlines()[1]
    assert head.startswith("# Branch of the search space: optimizer="), head
    best = head.rsplit("=", 1)[1]
    assert f"(branch optimizer={best})" in e.stdout, e.stdout
    cfg = TrainConfig.from_dict(__import__("yaml").safe_load((tmp_path / "best" / "best_config.yaml").read_text()))
    assert cfg.optimizer == best and (1e-2 <= cfg.lr <= 0.3 if best == "sgd" else 1e-4 <= cfg.lr <= 1e-2)
