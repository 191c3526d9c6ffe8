"""The fidelity-aware searcher and trial selection (without a Ray cluster, but for the last test:
Tune filling the slots our searcher keeps)."""
import math
import sys
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tuner.config import parse
from tuner.results import TrialRow, pareto_front, select
from tuner.schema import SearchEntry
from tuner.searcher import FidelitySearcher, tpe_sampler
from tuner.space import SearchSpace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
LR = SearchSpace({"lr": SearchEntry(type="loguniform", low=1e-3, high=1.0)})


def searcher(metric="val_acc", mode="max", **kw):
    return FidelitySearcher(space=LR, metric=metric, mode=mode, sampler=tpe_sampler(0), max_epochs=3, **kw)


def run(s, tid, epochs, status="ok", value=lambda e: 0.1 * e, error=False):
    s.suggest(tid)
    results = [{"epoch": e, "status": status, "val_acc": value(e), "epoch_s": 1.0 + e} for e in range(1, epochs + 1)]
    for r in results[:-1]:
        s.on_trial_result(tid, r)
    s.on_trial_complete(tid, results[-1], error=error)


def states(s):
    return {t.number: t for t in s.study.trials}


def test_stopped_finished_and_diverged_trials_are_told_apart():
    s = searcher()
    run(s, "a", 1)                                   # ASHA stopped it after epoch 1
    run(s, "b", 3)                                   # finished
    run(s, "c", 2, status="diverged", value=lambda e: 0.0)
    run(s, "d", 2, value=lambda e: float("nan"))     # a NaN metric is never told
    t = states(s)
    assert t[0].state == TrialState.PRUNED and t[0].intermediate_values == {1: 0.1}
    assert t[1].state == TrialState.COMPLETE and math.isclose(t[1].value, 0.3)
    assert t[1].intermediate_values == {1: 0.1, 2: 0.2, 3: 0.30000000000000004}
    assert t[2].state == TrialState.FAIL and t[3].state == TrialState.FAIL
    assert all(not (isinstance(v, float) and math.isnan(v)) for tr in t.values() for v in tr.intermediate_values.values())


def test_trials_asha_let_through_a_rung_unjudged_are_told_only_up_to_it():
    # Asynchronous ASHA promotes the first arrivals at a rung before eta - 1 others are there to
    # compare with; with `rungs`, those trials are told PRUNED at that rung, the others as before.
    s = searcher(rungs=(1,), eta=3)
    run(s, "a", 3)                                   # first at epoch 1: through unjudged
    run(s, "b", 1, value=lambda e: 0.05)             # second: one to compare with (ASHA stopped it)
    run(s, "c", 3, value=lambda e: 0.2 * e)          # third: compared with two, then finished
    t = states(s)
    assert t[0].state == TrialState.PRUNED and t[0].intermediate_values == {1: 0.1}
    assert t[1].state == TrialState.PRUNED and t[1].intermediate_values == {1: 0.05}
    assert t[2].state == TrialState.COMPLETE and math.isclose(t[2].value, 0.6)
    assert sorted(t[2].intermediate_values) == [1, 2, 3]
    assert s.rung_seen == {1: 3} and s.unjudged == {}
    # Without rungs (the default), a finished trial is COMPLETE whatever its place at the rung.
    plain = searcher()
    run(plain, "a", 3)
    assert states(plain)[0].state == TrialState.COMPLETE


def test_the_schedulers_rungs_are_ray_ashas():
    """Budget.rungs (our scheduler's, the searcher's, the console's and the report's) are the
    epochs where Ray's ASHAScheduler, which folders written before 0.3.0 resume with, compares."""
    from ray.tune.schedulers import ASHAScheduler

    from tuner import _compat
    from tuner.schema import Budget
    from tuner.tuning import asha
    for grace, top, eta in ((1, 9, 3), (1, 15, 3), (2, 9, 3), (1, 8, 2), (3, 27, 3), (1, 15, 2.5), (2, 30, 2.5)):
        budget = Budget(num_samples=8, max_epochs=top, grace_epochs=grace, reduction_factor=eta)
        ray_asha = ASHAScheduler(time_attr="epoch", metric="val_acc", mode="max", max_t=top, grace_period=grace,
                                 reduction_factor=eta)
        tune_rungs = [m for m in _compat.asha_milestones(ray_asha) if m < top]
        assert list(budget.rungs) == [math.ceil(m) for m in tune_rungs], (grace, top, eta)
        assert asha(budget, "val_acc", "max").rungs == budget.rungs


def test_multi_objective_study_prunes_without_intermediate_values():
    s = searcher(metric=["val_acc", "epoch_s"], mode=["max", "min"])
    run(s, "a", 1)
    run(s, "b", 3)
    t = states(s)
    assert t[0].state == TrialState.PRUNED and t[0].intermediate_values == {}
    assert t[1].state == TrialState.COMPLETE and t[1].values == [0.30000000000000004, 4.0]


def row(tid, acc, secs, status="ok", epoch=10):
    return TrialRow(tid, "TERMINATED", status, epoch, {"val_acc": acc, "epoch_s": secs}, {}, {}, "/ckpt")


EXP2 = """
name: t
second_objective: {metric: epoch_s, mode: min}
search: {lr: {type: uniform, low: 0.1, high: 0.2}}
"""


def test_pareto_selection():
    exp = parse(EXP2)
    rows = [row("fast", 0.90, 1.0), row("best", 0.97, 5.0), row("dominated", 0.89, 6.0),
            row("mid", 0.95, 2.0), row("bad", 0.99, 0.5, status="diverged"),
            row("stopped early", 0.5, 0.1, epoch=1)]
    assert {r.trial_id for r in pareto_front(rows[:4], exp.metrics, exp.modes)} == {"fast", "best", "mid"}
    assert select(exp, rows).trial_id == "best"
    assert select(exp, rows, "epoch_s:min").trial_id == "fast"
    assert select(exp, rows, "trial:mid").trial_id == "mid"


def test_a_restored_searcher_reopens_its_journal_where_the_folder_is_now(tmp_path):
    import shutil

    import optuna

    from tuner.searcher import JOURNAL, journal_storage
    old = tmp_path / "old"
    old.mkdir()
    s = searcher(study_name="exp", journal=old / JOURNAL)
    run(s, "a", 3)
    s.suggest("b")                                   # running when Tune took its snapshot
    s.save(str(old / "searcher-state.pkl"))
    s.suggest("c")                                   # suggested after the snapshot; then the driver died
    shutil.copytree(old, tmp_path / "moved")
    restored = FidelitySearcher(max_epochs=3)
    restored.restore(str(tmp_path / "moved" / "searcher-state.pkl"))
    run(restored, "d", 3)
    moved = optuna.load_study(study_name="exp", storage=journal_storage(tmp_path / "moved" / JOURNAL))
    untouched = optuna.load_study(study_name="exp", storage=journal_storage(old / JOURNAL))
    # The study went on in the moved folder's journal; the old one was left as it was.
    assert [t.state for t in moved.trials] == [TrialState.COMPLETE, TrialState.RUNNING, TrialState.FAIL,
                                               TrialState.COMPLETE]
    assert [t.state for t in untouched.trials] == [TrialState.COMPLETE, TrialState.RUNNING, TrialState.RUNNING]
    # "b" still has its Tune trial (resumed): it is told when that trial ends.
    restored.on_trial_complete("b", {"epoch": 3, "status": "ok", "val_acc": 0.5})
    assert optuna.load_study(study_name="exp", storage=journal_storage(tmp_path / "moved" / JOURNAL)).trials[1].state \
        == TrialState.COMPLETE


def lr_draws(num_samples, sampler=None, **levers):
    """The lr each trial of a `num_samples`-trial search drew, each finished before the next
    starts, with val_acc peaking at lr = 0.01: make_searcher's searcher, or `sampler`'s."""
    import optuna
    from levers import variant_searcher

    from tuner.schema import Budget, SearchEntry
    space = {"lr": SearchEntry(type="loguniform", low=1e-3, high=1.0)}
    budget = Budget(num_samples=num_samples, max_epochs=1, grace_epochs=1, reduction_factor=3)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = (variant_searcher(space, "val_acc", "max", 0, budget, **levers) if sampler is None else
         FidelitySearcher(space=SearchSpace(space), metric="val_acc", mode="max", sampler=sampler, max_epochs=1))
    out = []
    for i in range(num_samples):
        lr = s.suggest(f"t{i}")["lr"]
        s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": -abs(math.log10(lr) + 2)})
        out.append(lr)
    return out


def test_a_search_of_fewer_than_guided_from_trials_follows_a_sobol_sequence_and_a_larger_one_tpe():
    import optuna

    from tuner.searcher import GUIDED_FROM, sobol_sampler
    random = lambda n: lr_draws(n, optuna.samplers.RandomSampler(seed=0))
    small, large = GUIDED_FROM - 8, GUIDED_FROM + 6
    sobol = lr_draws(small)
    assert sobol == lr_draws(small, sobol_sampler(0)) and sobol != random(small)
    # Sobol points cover the (log) range evenly: every eighth of it holds one or two of the 15
    eighths = sorted(int((math.log10(x) + 3) / 3 * 8) for x in sobol[1:])   # the first is a random draw
    assert len(sobol) == 16 and {eighths.count(k) for k in range(8)} <= {1, 2}, eighths
    assert lr_draws(small, qmc=False) == random(small)                   # the lever: independent draws
    assert lr_draws(small, guided_from=0)[10:] != random(small)[10:]     # the lever: TPE after 10

    def miss(xs):   # mean distance of the guided trials from the best lr, in decades
        return sum(abs(math.log10(x) + 2) for x in xs[10:]) / len(xs[10:])
    guided, drawn = lr_draws(large), random(large)
    assert guided[:10] == drawn[:10] and miss(guided) < 0.5 * miss(drawn), (miss(guided), miss(drawn))


def test_random_every_k_draws_every_kth_trial_at_random_after_start_up_too():
    import optuna
    mixed, drawn = lr_draws(30, random_every=2), lr_draws(30, optuna.samplers.RandomSampler(seed=0))
    assert mixed[:10] == drawn[:10]
    assert [mixed[i] for i in range(11, 30, 2)] == drawn[10:20]   # trials 11, 13, ...: the next random draws
    assert all(mixed[i] not in drawn for i in range(10, 30, 2))   # the others TPE's


def test_a_diverging_trials_loss_at_a_rung_does_not_let_chance_level_trials_through():
    from dataclasses import dataclass

    from tuner.schema import Budget
    from tuner.tuning import asha

    @dataclass
    class T:
        trial_id: str

    def decisions(cutoff="ranked"):
        s = asha(Budget(num_samples=8, max_epochs=9, grace_epochs=1, reduction_factor=3, asha="stopping"), "val_loss",
                 "min", cutoff)
        out = []
        for tid, loss in (("diverging", 1000.0), ("good", 0.5), ("chance", 2.3), ("better", 0.4)):
            s.on_trial_add(None, T(tid))
            out.append(s.on_trial_result(None, T(tid), {"epoch": 1, "training_iteration": 1, "val_loss": loss}))
        return out
    # The first two pass (nothing / one worse to compare with); at chance level with 1000 and 0.5
    # recorded, the cutoff by rank is 0.5; Ray's interpolated cutoff is about 333.
    assert decisions() == ["CONTINUE", "CONTINUE", "STOP", "CONTINUE"]
    assert decisions("interpolated") == ["CONTINUE", "CONTINUE", "CONTINUE", "CONTINUE"]


def test_the_snapshot_of_a_cloud_experiment_carries_the_journal_and_the_rung_records(tmp_path):
    """For s3:// and gs:// experiments Tune uploads the searcher's snapshot folder: the journal
    and ASHA's rung file (both in the local copy of the folder) go there with each snapshot."""
    from tuner.scheduler import RUNG_FILE
    from tuner.searcher import JOURNAL
    local, staging = tmp_path / "local", tmp_path / "staging"
    local.mkdir()
    staging.mkdir()
    s = searcher(study_name="exp", journal=local / JOURNAL)
    s.journal_upload = str(local / JOURNAL)
    run(s, "a", 1)
    s.save(str(staging / "searcher-state.pkl"))
    assert (staging / JOURNAL).read_bytes() == (local / JOURNAL).read_bytes()
    assert not (staging / RUNG_FILE).exists()        # none yet: nothing is made up
    (local / RUNG_FILE).write_text('{"format": 1}')
    s.save(str(staging / "searcher-state.pkl"))
    assert (staging / RUNG_FILE).read_text() == '{"format": 1}'


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_short_trials_fill_every_slot_at_once(ray_address, tmp_path, monkeypatch):
    """Trials shorter than an actor's start still run four at a time on four CPUs: Tune asks
    for every free slot's actor at once (the driver's TUNE_MAX_PENDING_TRIALS_PG), instead of one
    pending trial that a finished trial's cached actor takes over before its own actor starts."""
    import json
    import time

    from ray import tune

    from trainables import settings
    from tuner.searcher import FixedSearcher
    for k, v in settings.driver_env(verbose=False, environ={}).items():
        monkeypatch.setenv(k, v)
    log = tmp_path / "spans.jsonl"

    def trainable(config):
        start = time.time()
        time.sleep(1.0)
        with open(log, "a") as f:
            f.write(json.dumps([start, time.time()]) + "\n")
        tune.report({"val_acc": 0.5, "epoch": 1})

    searcher = FixedSearcher("val_acc", "max")
    tune.Tuner(trainable, tune_config=tune.TuneConfig(search_alg=searcher, num_samples=16, max_concurrent_trials=4,
                                                     reuse_actors=True),
               run_config=tune.RunConfig(name="slots", storage_path=str(tmp_path), verbose=0)).fit()
    spans = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(spans) == 16
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most == 4, sorted(spans)


def test_the_gp_rung_model_keeps_each_proposal_pending_until_its_trial_reaches_the_rung():
    """With rung_sampler "gp", a proposal drawn from a rung's Gaussian process stays RUNNING in
    that rung's study (the GP's q-batch acquisition sees it) until its trial reports at the rung,
    ends, or waits paused at a lower rung; the value at the rung is added as a trial of its own."""
    xy = SearchSpace({"x": SearchEntry(type="uniform", low=0.0, high=1.0),
                      "y": SearchEntry(type="uniform", low=0.0, high=1.0)})
    f = lambda c: -((c["x"] - 0.7) ** 2 + (c["y"] - 0.2) ** 2)
    s = FidelitySearcher(space=xy, metric="val_acc", mode="max", sampler=tpe_sampler(0), max_epochs=9,
                         model_rungs=(1, 3, 9), seed=0, rung_sampler="gp")
    configs = {}
    for i in range(12):   # twelve trials stopped at epoch 1: rung 1 has enough points (10)
        configs[f"t{i}"] = c = s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": f(c)})
    rung = s.shadow(1)
    done = lambda: rung.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(done()) == 12 and s.pending == {}
    a, b = s.suggest("a"), s.suggest("b")
    running = rung.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert [t.params for t in running] == [{"x": a["x"], "y": a["y"]}, {"x": b["x"], "y": b["y"]}]
    assert set(s.pending) == {"a", "b"} and a != b
    s.on_trial_result("a", {"epoch": 1, "status": "ok", "val_acc": f(a)})     # a reaches rung 1
    assert set(s.pending) == {"b"} and len(done()) == 13 and done()[-1].params == running[0].params
    assert rung.trials[running[0].number].state == TrialState.FAIL          # no longer pending
    s.waiting = {"b"}                                                        # b waits at a lower rung
    s.suggest("c")
    assert set(s.pending) == {"c"} and rung.trials[running[1].number].state == TrialState.FAIL
    s.on_trial_complete("c", {"epoch": 1, "status": "diverged", "val_acc": 0.0})
    assert s.pending == {}
    # The GP's proposals are drawn where rung 1 is best: nearer (0.7, 0.2) than the first twelve.
    miss = lambda c: math.dist((c["x"], c["y"]), (0.7, 0.2))
    first = sorted(miss(c) for c in configs.values())[6]
    assert all(miss(c) < first for c in (a, b)), ([miss(c) for c in (a, b)], first)


def test_a_rung_with_more_points_than_a_gp_models_is_modelled_by_tpe(monkeypatch):
    import optuna

    import tuner.searcher as ts
    monkeypatch.setattr(ts, "GP_POINTS", 11)
    s = FidelitySearcher(space=LR, metric="val_acc", mode="max", sampler=tpe_sampler(0), max_epochs=3,
                         model_rungs=(1, 3), seed=0, rung_sampler="gp")
    for i in range(11):
        c = s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": -abs(math.log10(c["lr"]) + 2)})
    s.suggest("a")
    assert isinstance(s.shadow(1).sampler, optuna.samplers.GPSampler) and set(s.pending) == {"a"}
    s.on_trial_complete("a", {"epoch": 1, "status": "ok", "val_acc": -1.0})   # the twelfth point
    s.suggest("b")
    assert isinstance(s.shadow(1).sampler, optuna.samplers.TPESampler)


def test_the_gp_rung_model_repeats_its_proposals_given_the_seed():
    """reproducible: true holds with the GP rung model too: the same seed and results give the
    same proposals."""
    def proposals(seed):
        s = FidelitySearcher(space=LR, metric="val_acc", mode="max", sampler=tpe_sampler(seed), max_epochs=3,
                             model_rungs=(1, 3), seed=seed, rung_sampler="gp")
        out = []
        for i in range(14):
            c = s.suggest(f"t{i}")
            s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": -abs(math.log10(c["lr"]) + 2)})
            out.append(c["lr"])
        return out
    first = proposals(0)
    assert first == proposals(0) and first[10:] != proposals(1)[10:]


def test_mix_takes_the_rung_models_proposals_from_the_gp_and_tpe_in_turn():
    import optuna
    s = FidelitySearcher(space=LR, metric="val_acc", mode="max", sampler=tpe_sampler(0), max_epochs=3,
                         model_rungs=(1, 3), seed=0, rung_sampler="mix")
    for i in range(10):
        c = s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": -abs(math.log10(c["lr"]) + 2)})
    used = []
    for tid in "abcd":
        s.suggest(tid)
        used.append(type(s.shadow(1).sampler))
    assert used == [optuna.samplers.GPSampler, optuna.samplers.TPESampler] * 2
    assert set(s.pending) == set("abcd")   # TPE's proposals pend too (the GP's next ones see them)


def test_proposals_run_blas_and_torch_on_one_thread_and_leave_the_process_settings_as_they_were(monkeypatch):
    """The searcher proposes (TPE and the GP) with BLAS, OpenMP and torch on one thread: its
    matrices are small, and the driver's machine is the trials'.  The settings come back after."""
    import optuna
    import torch
    from threadpoolctl import threadpool_info
    start = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = []
    real_ask = optuna.Study.ask

    def ask(study, *a, **k):
        seen.append((torch.get_num_threads(), {p["internal_api"]: p["num_threads"] for p in threadpool_info()}))
        return real_ask(study, *a, **k)
    monkeypatch.setattr(optuna.Study, "ask", ask)
    before = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    s = FidelitySearcher(space=LR, metric="val_acc", mode="max", sampler=tpe_sampler(0), max_epochs=3,
                         model_rungs=(1, 3), seed=0, rung_sampler="mix")
    for i in range(12):   # the last two draw from the rung model: its ask and the study's
        c = s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": -abs(math.log10(c["lr"]) + 2)})
    assert len(seen) == 14 and all(threads == 1 and set(libs.values()) == {1} for threads, libs in seen), seen
    assert torch.get_num_threads() == 2
    assert {p["internal_api"]: p["num_threads"] for p in threadpool_info()} == before
    torch.set_num_threads(start)   # the rest of the suite keeps the process's own setting


def test_the_gp_models_the_rung_below_the_top_while_it_has_the_points_and_orders_the_top_rungs_trials_alike():
    """A GP proposal models the rung below the top one when that rung has at least twice the top
    rung's points and orders the trials of the top rung as the top rung does; where the two orders
    disagree (low epochs mislead), or the lower rung has too few points, the top rung.  TPE's turns
    model the top rung; a restored searcher decides alike."""
    import pickle

    def searcher_with(top_value):
        s = FidelitySearcher(space=LR, metric="val_acc", mode="max", sampler=tpe_sampler(0), max_epochs=3,
                             model_rungs=(1, 3), seed=0, rung_sampler="mix")
        for i in range(24):   # ten trials reach epoch 3, fourteen more stop at epoch 1
            c = s.suggest(f"t{i}")
            low = -abs(math.log10(c["lr"]) + 2)
            s.on_trial_result(f"t{i}", {"epoch": 1, "status": "ok", "val_acc": low})
            last = {"epoch": 3, "status": "ok", "val_acc": top_value(low)} if i < 10 else \
                {"epoch": 1, "status": "ok", "val_acc": low}
            s.on_trial_complete(f"t{i}", last)
        return s

    alike = searcher_with(lambda low: low + 0.5)
    assert alike.agreement(1, 3) == 1.0 and alike.gp_rung(3, {1: 24, 3: 10}) == 1
    assert alike.gp_rung(3, {1: 19, 3: 10}) == 3          # fewer than twice the top rung's points
    turns = {}
    for tid in "abcd":
        alike.suggest(tid)
        turns[tid] = (alike.pending[tid][0], type(alike.shadow(alike.pending[tid][0]).sampler).__name__)
    assert turns == {"a": (1, "GPSampler"), "b": (3, "TPESampler"), "c": (1, "GPSampler"), "d": (3, "TPESampler")}
    restored = pickle.loads(pickle.dumps(alike))           # the rung studies are rebuilt from the study
    assert restored.shadows is None and restored.proposals == alike.proposals and alike.proposals % 2 == 0
    restored.suggest("e")                                   # the next proposal: the GP's turn
    assert restored.pending["e"][0] == 1 and restored.agreement(1, 3) == 1.0

    misled = searcher_with(lambda low: -low)               # the top rung orders them the other way
    assert misled.agreement(1, 3) == 0.0 and misled.gp_rung(3, {1: 24, 3: 10}) == 3
    misled.suggest("a")
    assert misled.pending["a"][0] == 3
