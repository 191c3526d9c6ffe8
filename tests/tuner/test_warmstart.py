"""Warm start from an earlier experiment's study, without Ray: what comes in, what is dropped
and why, rescaled epochs, refusals, and a searcher that models from the first new trial."""
import os

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.config import parse
from tuner.experiment import save_experiment
from tuner.schema import ExperimentError
from tuner.searcher import JOURNAL, journal_storage, make_searcher
from tuner.warmstart import warm_trials

OLD_SPACE = {"lr": {"type": "loguniform", "low": 1.0e-4, "high": 1.0},
             "optimizer": {"type": "choice", "values": ["sgd", "adamw"]}}


def experiment(tmp_path, name, max_epochs=4, search=None, metric="val_acc", mode="max", dataset="digits", **extra):
    doc = {"name": name, "storage_path": str(tmp_path / "runs"), "metric": metric, "mode": mode,
           "budget": {"num_samples": 8, "max_epochs": max_epochs}, "train": {"dataset": dataset},
           "search": search or OLD_SPACE, **extra}
    return parse(yaml.safe_dump(doc))


def earlier(tmp_path, **kw):
    """An earlier experiment folder: its saved experiment and a study of five trials."""
    old = experiment(tmp_path, "old", **kw)
    save_experiment(old)
    study = optuna.create_study(storage=journal_storage(old.exp_dir / JOURNAL), study_name="old", direction="maximize")
    dists = {"lr": FloatDistribution(1e-4, 1.0, log=True), "optimizer": CategoricalDistribution(["sgd", "adamw"])}
    for lr, opt, state, curve in ((0.1, "sgd", TrialState.COMPLETE, [0.5, 0.7, 0.8, 0.9]),
                                  (0.3, "adamw", TrialState.PRUNED, [0.3]),
                                  (0.9, "sgd", TrialState.COMPLETE, [0.2, 0.3, 0.4, 0.5]),   # lr outside the new space
                                  (0.01, "adamw", TrialState.FAIL, []),
                                  (0.02, "adamw", TrialState.PRUNED, [0.4, 0.6])):
        study.add_trial(create_trial(state=state, params={"lr": lr, "optimizer": opt}, distributions=dists,
                                     value=curve[-1] if state == TrialState.COMPLETE else None,
                                     intermediate_values=dict(enumerate(curve, 1))))
    return old


NEW_SPACE = {"lr": {"type": "loguniform", "low": 1.0e-3, "high": 0.5},
             "optimizer": {"type": "choice", "values": ["sgd", "adamw"]}}


def test_earlier_trials_come_in_rescaled_and_those_outside_the_space_are_dropped_with_a_note(tmp_path):
    old = earlier(tmp_path)
    new = experiment(tmp_path, "new", max_epochs=8, search=NEW_SPACE, warm_start=str(old.exp_dir))
    trials, notes = warm_trials(new)
    assert [(t.params["lr"], t.state) for t in trials] == [(0.1, TrialState.COMPLETE), (0.3, TrialState.PRUNED),
                                                         (0.02, TrialState.PRUNED)]
    # Epochs 1-4 of 4 are epochs 2-8 of 8; the new space's distributions, not the old ones.
    assert trials[0].intermediate_values == {2: 0.5, 4: 0.7, 6: 0.8, 8: 0.9} and trials[0].value == 0.9
    assert trials[2].intermediate_values == {2: 0.4, 4: 0.6}
    assert trials[0].distributions["lr"] == FloatDistribution(1e-3, 0.5, log=True)
    assert trials[0].user_attrs["warm_start_number"] == 0
    assert notes == [f"warm start: 3 trials from {old.exp_dir}", "warm start: epochs rescaled x2 (max_epochs 4 -> 8)",
                     "warm start: 1 trial(s) dropped: lr=0.9 outside the new space"]


def test_a_setting_the_earlier_search_did_not_have_drops_its_trials(tmp_path):
    old = earlier(tmp_path)
    wider = {**NEW_SPACE, "weight_decay": {"type": "loguniform", "low": 1.0e-5, "high": 1.0e-2}}
    trials, notes = warm_trials(experiment(tmp_path, "new", search=wider, warm_start=str(old.exp_dir)))
    assert trials == [] and notes[1:] == ["warm start: 3 trial(s) dropped: weight_decay not set",
                                      "warm start: 1 trial(s) dropped: lr=0.9 outside the new space"]


@pytest.mark.parametrize("change, word", [({"metric": "val_loss", "mode": "min"}, "same metric and mode"),
                                          ({"mode": "min"}, "same metric and mode"),
                                          ({"dataset": "cifar10"}, "same dataset")])
def test_another_metric_mode_or_dataset_is_refused_in_one_line(tmp_path, change, word):
    old = earlier(tmp_path)
    new = experiment(tmp_path, "new", search=NEW_SPACE, warm_start=str(old.exp_dir), **change)
    with pytest.raises(ExperimentError) as e:
        warm_trials(new)
    assert len(e.value.problems) == 1 and word in e.value.problems[0] and str(old.exp_dir) in e.value.problems[0]


def test_an_earlier_folder_writable_by_others_is_refused_as_resume_refuses_it(tmp_path):
    old = earlier(tmp_path)
    os.chmod(old.exp_dir / JOURNAL, 0o666)
    with pytest.raises(ExperimentError, match="refused"):
        warm_trials(experiment(tmp_path, "new", search=NEW_SPACE, warm_start=str(old.exp_dir)))


def test_a_folder_without_a_study_is_refused(tmp_path):
    old = experiment(tmp_path, "plain")
    save_experiment(old)
    with pytest.raises(ExperimentError, match="optuna-journal.log is missing"):
        warm_trials(experiment(tmp_path, "new", search=NEW_SPACE, warm_start=str(old.exp_dir)))


def test_the_earlier_folder_is_left_as_it_was(tmp_path):
    old = earlier(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in old.exp_dir.rglob("*")}
    warm_trials(experiment(tmp_path, "new", search=NEW_SPACE, warm_start=str(old.exp_dir)))
    assert {p: p.stat().st_mtime_ns for p in old.exp_dir.rglob("*")} == before


def test_a_warm_started_small_search_models_from_its_first_trial(tmp_path):
    """Below 24 trials a search is a Sobol sequence; warm-started it is TPE, and with ten earlier
    trials TPE's start-up is over: the first new proposal comes from the model."""
    old = experiment(tmp_path, "old", search=NEW_SPACE)
    save_experiment(old)
    study = optuna.create_study(storage=journal_storage(old.exp_dir / JOURNAL), study_name="old", direction="maximize")
    dists = {"lr": FloatDistribution(1e-3, 0.5, log=True), "optimizer": CategoricalDistribution(["sgd", "adamw"])}
    for i in range(12):   # the best trials all have lr near 0.01 with adamw
        lr = 10 ** (-3 + 2.6 * i / 11)
        study.add_trial(create_trial(params={"lr": lr, "optimizer": "adamw" if i % 2 else "sgd"}, distributions=dists,
                                     value=1.0 - abs(lr - 0.01) - (0.0 if i % 2 else 0.3)))
    new = experiment(tmp_path, "new", search=NEW_SPACE, warm_start=str(old.exp_dir))
    warm, _ = warm_trials(new)
    cold = make_searcher(new.search, "val_acc", "max", 0, new.budget)
    hot = make_searcher(new.search, "val_acc", "max", 0, new.budget, warm=True)
    assert isinstance(cold.sampler, optuna.samplers.QMCSampler) and isinstance(hot.sampler, optuna.samplers.TPESampler)
    for t in warm:
        hot.study.add_trial(t)
    drawn = [hot.suggest(f"t{i}") for i in range(4)]
    assert all(d["optimizer"] == "adamw" for d in drawn), drawn
    assert all(2e-3 < d["lr"] < 0.1 for d in drawn), drawn
