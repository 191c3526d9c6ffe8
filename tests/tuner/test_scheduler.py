"""ASHA of ours (tuner/scheduler.py) against a stand-in for Tune's controller: stopping and
promotion decisions, the end of a search, slots, and the rung file across a resume."""
import json
import math

import pytest
from ray.tune.experiment import Trial

from tuner.scheduler import RUNG_FILE, RungScheduler, read_records
from tuner.schema import Budget
from tuner.searcher import FixedSearcher
from tuner.tuning import asha

CONTINUE, PAUSE, STOP = "CONTINUE", "PAUSE", "STOP"


class T:
    """What the scheduler reads of a Tune trial: its id and status."""

    def __init__(self, trial_id, status=Trial.RUNNING):
        self.trial_id, self.status = trial_id, status

    def set_status(self, status):
        self.status = status


class Limiter:   # Ray's ConcurrencyLimiter holds the searcher as `.searcher`
    def __init__(self, searcher, finished):
        self.searcher, self.finished = searcher, finished

    def is_finished(self):
        return self.finished


class Controller:
    """Tune's controller as a scheduler sees it: trials, the search algorithm, stop_trial."""

    def __init__(self, trials=(), searcher=None, finished=False):
        self.trials, self.stopped, self.marked = list(trials), [], []
        self.search_alg = Limiter(searcher or FixedSearcher("val_loss", "min"), finished)

    def get_trials(self):
        return self.trials

    def stop_trial(self, t):
        self.stopped.append(t.trial_id)
        t.status = Trial.TERMINATED

    def _mark_trial_to_checkpoint(self, t):   # what tuner._compat.mark_trial_state calls
        self.marked.append(t.trial_id)


def budget(**kw):
    return Budget(**{"num_samples": 9, "max_epochs": 9, "grace_epochs": 1, "reduction_factor": 3, **kw})


def result(epoch, loss):
    return {"epoch": epoch, "val_loss": loss, "status": "ok"}


def test_stopping_asha_cuts_by_rank_and_stops_at_max_epochs():
    s = asha(budget(asha="stopping"), "val_loss", "min")
    assert not s.promotion and s.rungs == (1, 3)
    out = [s.on_trial_result(None, T(tid), result(1, loss))
           for tid, loss in (("diverging", 1000.0), ("good", 0.5), ("chance", 2.3), ("better", 0.4))]
    # By rank the cutoff at chance level is 0.5 (a recorded value); Ray's interpolation gives ~333.
    assert out == [CONTINUE, CONTINUE, STOP, CONTINUE]
    i = asha(budget(asha="stopping"), "val_loss", "min", cutoff="interpolated")
    assert [i.on_trial_result(None, T(tid), result(1, loss))
            for tid, loss in (("diverging", 1000.0), ("good", 0.5), ("chance", 2.3))] == [CONTINUE] * 3
    # A trial is judged once per rung, at its first result there; the last epoch stops it.
    assert s.on_trial_result(None, T("good"), result(2, 9.0)) == CONTINUE
    assert s.on_trial_result(None, T("good"), result(9, 0.1)) == STOP


def test_promotion_pauses_at_a_rung_and_promotes_once_a_trial_ranks_in_the_top_third():
    s = asha(budget(asha="promotion"), "val_loss", "min")
    a, b, c = T("a"), T("b"), T("c")
    assert s.on_trial_result(None, a, result(1, 0.5)) == PAUSE   # 1 recorded: floor(1/3) = 0 go on
    assert s.on_trial_result(None, b, result(1, 0.9)) == PAUSE
    a.status = b.status = Trial.PAUSED
    ctl = Controller([a, b])
    assert s.choose_trial_to_run(ctl) is None                   # nothing promotable, search not over
    assert s.on_trial_result(None, c, result(1, 0.7)) == PAUSE   # 3 recorded: the best one, a, may go on
    c.status = Trial.PAUSED
    ctl.trials.append(c)
    assert s.choose_trial_to_run(ctl) is a                       # promoted ahead of any new trial
    assert s.promoted[1] == ["a"] and "a" not in s.paused
    a.status = Trial.RUNNING
    assert s.choose_trial_to_run(ctl) is None                    # a is not promoted twice
    # A trial in the top set when it arrives goes straight on, even if one promoted before it
    # has dropped out of that set since (a promotion is never taken back).
    assert s.on_trial_result(None, T("d"), result(1, 0.1)) == CONTINUE   # 4 recorded: top 1 is d
    assert s.promoted[1] == ["a", "d"]
    assert s.on_trial_result(None, a, result(2, 0.4)) == CONTINUE   # between rungs: no decision


def test_a_trial_in_the_top_set_on_arrival_continues_without_pausing():
    s = asha(budget(asha="promotion"), "val_loss", "min")
    for tid, loss in (("a", 0.9), ("b", 0.8)):
        s.on_trial_result(None, T(tid), result(1, loss))
    assert s.on_trial_result(None, T("c"), result(1, 0.1)) == CONTINUE
    assert s.promoted[1] == ["c"]


def test_when_the_search_is_over_paused_trials_end_as_stopped_at_their_rung():
    s = asha(budget(asha="promotion"), "val_loss", "min")
    trials = [T(t) for t in "abc"]
    for t, loss in zip(trials, (0.5, 0.6, 0.7)):
        s.on_trial_result(None, t, result(1, loss))
        t.status = Trial.PAUSED
    running = T("d", Trial.RUNNING)
    ctl = Controller(trials + [running], finished=True)
    assert s.choose_trial_to_run(ctl) is trials[0]                # promotion first
    trials[0].status = Trial.RUNNING
    assert s.choose_trial_to_run(ctl) is None and ctl.stopped == []   # trials still run: wait
    trials[0].status = running.status = Trial.TERMINATED
    assert s.choose_trial_to_run(ctl) is None
    assert ctl.stopped == ctl.marked == ["b", "c"] and s.stopped == {"b": 1, "c": 1} and s.paused == {}
    assert all(t.status == Trial.TERMINATED for t in ctl.trials)


def test_a_rung_that_promoted_nobody_sends_its_best_on_when_the_search_is_over():
    """Fewer than eta trials at a rung: its top set stays empty.  Once the search is over and
    nothing runs, each such rung (highest first) promotes its best paused trial, so a small search
    still trains one trial to max_epochs; the others end at their rung."""
    s = asha(budget(asha="promotion"), "val_loss", "min")    # rungs 1 and 3, max 9
    a, b = T("a"), T("b")
    assert s.on_trial_result(None, a, result(1, 0.9)) == PAUSE
    assert s.on_trial_result(None, b, result(1, 0.5)) == PAUSE
    a.status = b.status = Trial.PAUSED
    ctl = Controller([a, b], finished=True)
    assert s.choose_trial_to_run(ctl) is b and s.promoted[1] == ["b"]   # the better one
    b.status = Trial.RUNNING
    assert s.choose_trial_to_run(ctl) is None and ctl.stopped == []     # b runs: nothing ends yet
    assert s.on_trial_result(None, b, result(3, 0.4)) == PAUSE          # alone at rung 3
    b.status = Trial.PAUSED
    assert s.choose_trial_to_run(ctl) is b and s.promoted[3] == ["b"]
    b.status = Trial.RUNNING
    assert s.on_trial_result(None, b, result(9, 0.3)) == STOP           # max_epochs: it ends there
    b.status = Trial.TERMINATED
    assert s.choose_trial_to_run(ctl) is None
    assert ctl.stopped == ["a"] and s.stopped == {"a": 1} and s.paused == {}
    one = asha(budget(asha="promotion", num_samples=1), "val_loss", "min")   # a single trial
    only = T("only")
    assert one.on_trial_result(None, only, result(1, 0.5)) == PAUSE
    only.status = Trial.PAUSED
    assert one.choose_trial_to_run(Controller([only], finished=True)) is only


def test_paused_trials_hold_no_slot():
    searcher = FixedSearcher("val_loss", "min")
    assert searcher.set_max_concurrency(2)     # the searcher counts slots, not Ray's limiter
    assert searcher.suggest("a") == {} and searcher.suggest("b") == {}
    assert searcher.suggest("c") is None
    s = asha(budget(asha="promotion"), "val_loss", "min")
    a, b = T("a", Trial.PAUSED), T("b")
    s.paused["a"] = 1
    s.choose_trial_to_run(Controller([a, b], searcher))
    assert searcher.waiting == {"a"} and searcher.suggest("c") == {}
    assert searcher.suggest("d") is None


def test_the_rung_file_carries_the_decisions_across_a_resume(tmp_path):
    records = tmp_path / RUNG_FILE
    s = asha(budget(asha="promotion"), "val_loss", "min", records=records)
    for tid, loss in (("a", 0.5), ("b", 0.6), ("c", 0.7), ("d", 0.8)):
        s.on_trial_result(None, T(tid), result(1, loss))
    s.choose_trial_to_run(Controller([T(t, Trial.PAUSED) for t in "abcd"]))   # a promoted
    s.stopped["d"], _ = 1, s.paused.pop("d")                                 # d ended at rung 1
    s.save()
    saved = json.loads(records.read_text())
    assert saved["format"] == 1 and saved["promoted"] == {"1": ["a"], "3": []}
    assert saved["paused"] == {"b": 1, "c": 1} and saved["stopped"] == {"d": 1}

    # `resume`: Tune unpickles the scheduler as it was at the start and restores every
    # unfinished trial as PENDING; the rung file decides what happens to them.
    import pickle
    r = pickle.loads(pickle.dumps(asha(budget(asha="promotion"), "val_loss", "min", records=records)))
    restored = {t: T(t, Trial.PENDING) for t in "abcd"}
    for t in restored.values():
        r.on_trial_add(None, t)
    assert restored["a"].status == Trial.PENDING              # promoted: runs on
    assert restored["b"].status == restored["c"].status == restored["d"].status == Trial.PAUSED
    ctl = Controller(list(restored.values()))
    assert r.choose_trial_to_run(ctl) is restored["a"]        # ... and is not promoted again
    assert ctl.stopped == ["d"]                               # ended at its rung before: ended again
    assert r.promoted[1] == ["a"]
    # Two more trials at rung 1 (6 recorded): b is second best, so it is promoted now; d never.
    for tid, loss in (("e", 0.9), ("f", 0.95)):
        r.on_trial_result(None, T(tid), result(1, loss))
    restored["a"].status = Trial.RUNNING
    assert r.choose_trial_to_run(ctl) is restored["b"]
    assert r.promoted[1] == ["a", "b"] and "d" not in r.paused


@pytest.mark.parametrize("text, why", [
    ("{not json", "unreadable"),
    ('{"format": 99}', "format 99"),
    ('{"format": 1, "rungs": [1, 3]}', "'recorded'"),
])
def test_a_bad_rung_file_is_refused_by_name(tmp_path, text, why):
    (tmp_path / RUNG_FILE).write_text(text)
    with pytest.raises(ValueError, match=why) as e:
        read_records(tmp_path / RUNG_FILE)
    assert RUNG_FILE in str(e.value)


def test_nan_and_missing_metrics_rank_last():
    s = RungScheduler((1,), 3, 3, "val_acc", "max", promotion=True)
    assert s.score({"val_acc": float("nan")}) == -math.inf and s.score({}) == -math.inf
    assert s.score({"val_acc": 0.5, "status": "diverged"}) == -math.inf
    assert s.score({"val_acc": 0.5}) == 0.5


def test_promotion_needs_a_checkpoint_at_every_rung():
    import yaml

    from tuner.config import parse
    from tuner.schema import ExperimentError

    def problems(budget_asha="promotion", **doc):
        d = {"name": "p", "metric": "val_loss", "mode": "min", "train": {"dataset": "synthetic"},
             "budget": {"num_samples": 4, "max_epochs": 9, "asha": budget_asha}, **doc}
        try:
            parse(yaml.safe_dump(d))
        except ExperimentError as e:
            return e.problems
        return []
    assert problems() == []
    (p,) = problems(train={"dataset": "synthetic", "checkpoint_every": 2})
    assert p.startswith("train.checkpoint_every: 2") and "[1, 3]" in p and "budget.asha: stopping" in p
    (p,) = problems(search={"checkpoint_every": {"type": "int", "low": 1, "high": 3}})   # 2 lies inside
    assert p.startswith("train.checkpoint_every: 2")
    assert problems("stopping", train={"dataset": "synthetic", "checkpoint_every": 2}) == []
    (p,) = problems("sometimes")
    assert "budget.asha" in p and "sometimes" in p
    d = {"name": "p", "train": {"dataset": "synthetic"},
         "budget": {"num_samples": 4, "max_epochs": 9, "asha": "promotion", "time_limit_s": 600}}
    with pytest.raises(ExperimentError) as e:
        parse(yaml.safe_dump(d))
    (p,) = e.value.problems
    assert p.startswith("budget.time_limit_s: 600 with budget.asha: promotion")


def test_at_one_trial_at_a_time_a_due_promotion_waits_for_the_slot_and_keeps_it():
    """reproducible: true runs one trial at a time: a promotion never runs beside another trial,
    and no new trial takes the slot a due promotion waits for."""
    searcher = FixedSearcher("val_loss", "min")
    searcher.set_max_concurrency(1)
    s = asha(budget(asha="promotion"), "val_loss", "min")
    a, b, c = (T(t) for t in "abc")
    for t in (a, b):
        assert searcher.suggest(t.trial_id) == {}
        ctl = Controller([a, b][: "ab".index(t.trial_id) + 1], searcher)
        assert s.on_trial_result(ctl, t, result(1, {"a": 0.3, "b": 0.6}[t.trial_id])) == PAUSE
        t.status = Trial.PAUSED
        s.choose_trial_to_run(ctl)
    assert searcher.waiting == {"a", "b"}               # neither is due: both give their slot up
    assert searcher.suggest("c") == {}
    ctl = Controller([a, b, c], searcher)
    # c reaches the rung and, worse than a, pauses: a (best of 3) is due, and keeps the slot.
    assert s.on_trial_result(ctl, c, result(1, 0.9)) == PAUSE
    assert searcher.waiting == {"b"} and searcher.suggest("d") is None
    c.status = Trial.PAUSED
    assert s.choose_trial_to_run(ctl) is a
    a.status = Trial.RUNNING
    s.choose_trial_to_run(ctl)
    assert searcher.waiting == {"b", "c"} and searcher.suggest("d") is None   # a runs: the one slot is taken
    # While a trial runs, a promotion that becomes due waits for it.
    s2 = asha(budget(asha="promotion"), "val_loss", "min")
    x, y, z = T("x", Trial.PAUSED), T("y", Trial.PAUSED), T("z", Trial.RUNNING)
    for t, loss in ((x, 0.1), (y, 0.5), (T("w"), 0.7)):
        s2.recorded[1][t.trial_id] = loss * -1
    s2.paused.update(x=1, y=1)
    ctl2 = Controller([x, y, z], searcher)
    assert s2.choose_trial_to_run(ctl2) is None and s2.paused == {"x": 1, "y": 1}
    z.status = Trial.TERMINATED
    assert s2.choose_trial_to_run(ctl2) is x


def test_reproducible_refuses_what_would_make_a_rerun_differ():
    import yaml

    from tuner.config import parse
    from tuner.schema import ExperimentError

    def problems(**budget):
        d = {"name": "r", "reproducible": True, "train": {"dataset": "synthetic"},
             "budget": {"num_samples": 4, "max_epochs": 3, **budget}}
        try:
            exp = parse(yaml.safe_dump(d))
        except ExperimentError as e:
            return e.problems
        assert exp.base_config()["deterministic"] is True   # trials train deterministically
        return []
    assert problems() == [] and problems(max_concurrent_trials=1) == []
    (p,) = problems(max_concurrent_trials=2)
    assert p.startswith("budget.max_concurrent_trials: 2 with reproducible: true")
    (p,) = problems(time_limit_s=60)
    assert p.startswith("budget.time_limit_s: 60 with reproducible: true")
