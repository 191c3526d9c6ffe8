"""ASHA on Ray's public TrialScheduler API, in two modes (`budget.asha`).

stopping: a trial reaching a rung goes on if it is not below the top 1/eta of the trials
    recorded there before it (the cutoff by rank: a value some trial recorded, numpy's "nearest"
    percentile), else it stops for good.  The first arrivals at a rung pass unjudged.
promotion: a trial reaching a rung pauses there (Tune saves its checkpoint and frees its
    slot) unless it is already among the top floor(n/eta) of the n trials recorded at that rung;
    a paused trial is promoted (resumed from its checkpoint) as soon as enough trials have
    reached its rung for it to be in that top set.  Promotions go before new trials.  When the
    searcher has no trial left to start and nothing runs, a rung that promoted nobody promotes
    its best paused trial (last_promotion), and then the paused trials that were not promoted
    are finished as "stopped at rung r" (TERMINATED, like a trial stopping ASHA ends).

Ray saves no scheduler state, so the rung records live in a JSON file of their own in the
experiment folder (RUNG_FILE, written atomically on every change); `resume` hands the scheduler
the folder and it reads them back: a trial stopped at a rung before the resume is not promoted
after it, one promoted is not promoted twice, one paused stays paused until it earns promotion.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from .text import finite

# JSON, named so that Tune leaves it alone: on a restore Tune copies every *.json and *.pkl of the
# experiment folder into its driver staging folder and syncs that copy back over the folder
# while the run goes on, which would put back the records as they were at the restore.
RUNG_FILE = "asha-rungs.state"
FORMAT = 1


class RungScheduler(TrialScheduler):
    """ASHA over `rungs` (the epochs where trials are compared, Budget.rungs) up to max_epochs."""

    def __init__(self, rungs: tuple[int, ...], max_epochs: int, eta: float, metric: str | None = None,
                 mode: str | None = None, promotion: bool = False, cutoff: str = "ranked",
                 records: str | Path | None = None):
        super().__init__()
        if cutoff not in ("ranked", "interpolated"):
            raise ValueError(f"cutoff {cutoff!r}: 'ranked' or 'interpolated'")
        self.rungs, self.max_epochs, self.eta = tuple(sorted(rungs)), max_epochs, eta
        self.metric_name, self.mode = metric, mode
        self.promotion, self.cutoff = promotion, cutoff
        self.records = str(records) if records else None
        self.recorded: dict[int, dict[str, float]] = {r: {} for r in self.rungs}   # rung -> trial -> score
        self.promoted: dict[int, list[str]] = {r: [] for r in self.rungs}         # rung -> trials sent on
        self.paused: dict[str, int] = {}    # trial -> the rung it waits at
        self.stopped: dict[str, int] = {}   # trial -> the rung it was finished at (promotion mode)
        self.waiting_before: set[str] = set()   # paused when the rung file was read back
        self.tops: dict[int, tuple[int, list[str]]] = {}   # rung -> (records then, their top set)
        self.loaded = False

    # ------------------------------------------------------------ Tune's calls

    @property
    def metric(self):
        return self.metric_name

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if self.metric_name and metric and metric != self.metric_name:
            return False
        self.metric_name = self.metric_name or metric
        self.mode = self.mode or mode
        return True

    def on_trial_add(self, tune_controller, trial: Trial) -> None:
        self.load()
        tid = trial.trial_id
        if (tid in self.waiting_before or tid in self.stopped) and trial.status == Trial.PENDING:
            # Restored by `resume` as PENDING (Tune restarts every unfinished trial): one paused
            # waits at its rung as before; one finished at a rung (Tune's state saved before it
            # ended) is ended again by choose_trial_to_run.  Tune files the trial by the status it
            # has after this call.
            self.waiting_before.discard(tid)
            trial.set_status(Trial.PAUSED)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        epoch = result.get("epoch")
        if epoch is None:
            return TrialScheduler.CONTINUE
        tid, epoch = trial.trial_id, int(epoch)
        if epoch >= self.max_epochs:
            return TrialScheduler.STOP
        if tid in self.paused:   # restored while paused and run anyway: judged again at its rung
            return self.pause_or_go(tid, self.paused[tid])
        for rung in reversed(self.rungs):
            if epoch >= rung and tid not in self.recorded[rung]:
                score = self.score(result)
                if not self.promotion:
                    cut = self.cut(list(self.recorded[rung].values()))
                    self.recorded[rung][tid] = score
                    self.save()
                    return TrialScheduler.STOP if cut is not None and score < cut else TrialScheduler.CONTINUE
                self.recorded[rung][tid] = score
                decision = self.pause_or_go(tid, rung)
                if tune_controller is not None:   # a trial at this rung may have made a promotion due
                    self.hold_slots(slot_searcher(tune_controller), list(tune_controller.get_trials()))
                return decision
            if epoch >= rung:
                break
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict) -> None:
        self.paused.pop(trial.trial_id, None)

    def on_trial_error(self, tune_controller, trial: Trial) -> None:
        if self.paused.pop(trial.trial_id, None) is not None:
            self.save()

    def on_trial_remove(self, tune_controller, trial: Trial) -> None:
        if self.paused.pop(trial.trial_id, None) is not None:
            self.save()

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        trials = list(tune_controller.get_trials())
        for t in trials:
            if t.status == Trial.PAUSED and t.trial_id in self.stopped:
                end(tune_controller, t)
        if self.promotion:
            searcher = slot_searcher(tune_controller)
            cap = searcher.cap() if searcher is not None else 0
            busy = sum(t.status in (Trial.PENDING, Trial.RUNNING) for t in trials)
            chosen = self.promote(trials) if not cap or busy < cap else None
            self.hold_slots(searcher, trials)
            if chosen is not None:
                return chosen
        for t in trials:
            if t.status == Trial.PENDING:
                return t
        if self.promotion and tune_controller.search_alg.is_finished() and \
                not any(t.status in (Trial.PENDING, Trial.RUNNING) for t in trials):
            last = self.last_promotion(trials)
            if last is not None:
                return last
            self.finish_paused(tune_controller, trials)
        for t in trials:   # paused for another reason than a rung (none today): Tune's order
            if t.status == Trial.PAUSED and t.trial_id not in self.paused:
                return t
        return None

    def debug_string(self) -> str:
        counts = ", ".join(f"{r}: {len(v)}" for r, v in self.recorded.items())
        return f"ASHA ({'promotion' if self.promotion else 'stopping'}): trials at rungs {counts or '-'}"

    # ------------------------------------------------------------ decisions

    def score(self, result: dict) -> float:
        """Higher is better; a missing, NaN or infinite value ranks last."""
        v = result.get(self.metric_name) if self.metric_name else None
        if not finite(v) or result.get("status", "ok") != "ok":
            return -math.inf
        return float(v) if self.mode != "min" else -float(v)

    def cut(self, scores: list[float]) -> float | None:
        if not scores:
            return None
        q = (1 - 1 / self.eta) * 100
        if self.cutoff == "ranked":
            return float(np.nanpercentile(np.asarray(scores), q, method="nearest"))
        return float(np.nanpercentile(np.asarray(scores), q))

    def top(self, rung: int) -> list[str]:
        """The trials recorded at `rung` that may go on from it: the best floor(n / eta), ties
        by who recorded first."""
        rec = self.recorded[rung]
        known = self.tops.get(rung)
        if known is None or known[0] != len(rec):   # records are only ever added: their count dates the set
            order = sorted(rec, key=lambda t: -rec[t])   # stable: ties keep their recording order
            known = self.tops[rung] = (len(rec), order[:int(len(rec) // self.eta)])
        return known[1]

    def pause_or_go(self, tid: str, rung: int) -> str:
        if tid in self.promoted[rung] or (tid in self.top(rung) and tid not in self.stopped):
            if tid not in self.promoted[rung]:
                self.promoted[rung].append(tid)
            self.paused.pop(tid, None)
            self.save()
            return TrialScheduler.CONTINUE
        self.paused[tid] = rung
        self.save()
        return TrialScheduler.PAUSE

    def due(self) -> list[tuple[int, str]]:
        """(rung, trial) of every paused trial that ranks in its rung's top set now, highest
        rung first."""
        return [(rung, tid) for rung in reversed(self.rungs) for tid in self.top(rung)
                if self.paused.get(tid) == rung and tid not in self.promoted[rung]]

    def promote(self, trials: list[Trial]) -> Trial | None:
        """The paused trial to resume now: from the highest rung that has one in its top set."""
        by_id = {t.trial_id: t for t in trials if t.status == Trial.PAUSED}
        for rung, tid in self.due():
            if tid in by_id:
                return self.send_on(rung, by_id[tid])
        return None

    def send_on(self, rung: int, trial: Trial) -> Trial:
        """A paused trial promoted from `rung`, recorded as such: the trial for Tune to resume."""
        self.promoted[rung].append(trial.trial_id)
        del self.paused[trial.trial_id]
        self.save()
        return trial

    def last_promotion(self, trials: list[Trial]) -> Trial | None:
        """The search is over and nothing runs: a rung that promoted no trial (fewer than eta
        reached it, so its top set was empty) promotes its best paused one, highest rung first,
        as synchronous successive halving keeps max(1, floor(n / eta)); so a small search (a
        single trial, too) still trains a trial to max_epochs."""
        by_id = {t.trial_id: t for t in trials if t.status == Trial.PAUSED}
        for rung in reversed(self.rungs):
            if self.promoted[rung]:
                continue
            waiting = [tid for tid, r in self.paused.items() if r == rung and tid in by_id]
            if waiting:
                rec = self.recorded[rung]
                tid = max(waiting, key=lambda t: rec.get(t, -math.inf))   # ties: the first recorded
                return self.send_on(rung, by_id[tid])
        return None

    def finish_paused(self, tune_controller, trials: list[Trial]) -> None:
        """The search is over: trials still waiting at a rung end there as stopped."""
        for t in trials:
            rung = self.paused.get(t.trial_id)
            if rung is not None and t.status == Trial.PAUSED:
                self.stopped[t.trial_id] = rung
                del self.paused[t.trial_id]
                self.save()
                end(tune_controller, t)

    def hold_slots(self, searcher, trials: list[Trial]) -> None:
        """Tells the searcher which trials wait at a rung with no promotion due: they hold no
        slot of max_concurrent_trials (Ray's limiter would count them as running).  A trial whose
        promotion is due keeps its slot, so that no new trial takes it first."""
        if searcher is not None:
            due = {tid for _, tid in self.due()}
            searcher.waiting = {t.trial_id for t in trials
                                if t.status == Trial.PAUSED and t.trial_id in self.paused and t.trial_id not in due}

    # ------------------------------------------------------------ the rung file

    def state(self) -> dict[str, Any]:
        return {"format": FORMAT, "mode": "promotion" if self.promotion else "stopping",
                "rungs": list(self.rungs), "eta": self.eta,
                "recorded": {str(r): v for r, v in self.recorded.items()},
                "promoted": {str(r): v for r, v in self.promoted.items()},
                "paused": self.paused, "stopped": self.stopped}

    def save(self) -> None:
        if not self.records:
            return
        path = Path(self.records)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(self.state(), f, allow_nan=True)
        os.replace(tmp, path)

    def load(self) -> None:
        """The rung records in the experiment folder, once (none there: a new run)."""
        if self.loaded:
            return
        self.loaded = True
        if not self.records or not Path(self.records).is_file():
            return
        s = read_records(self.records)
        if s["rungs"] != list(self.rungs):
            raise ValueError(f"{self.records}: rungs {s['rungs']} differ from this experiment's {list(self.rungs)}")
        self.recorded = {int(r): {t: float(v) for t, v in d.items()} for r, d in s["recorded"].items()}
        self.promoted = {int(r): list(v) for r, v in s["promoted"].items()}
        self.paused = {t: int(r) for t, r in s["paused"].items()}
        self.stopped = {t: int(r) for t, r in s["stopped"].items()}
        self.waiting_before = set(self.paused)
        self.tops = {}

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the scheduler once, at the start; what it learns is in the rung file.
        state = dict(self.__dict__)
        state["loaded"] = False
        return state


def end(tune_controller, trial: Trial) -> None:
    """A paused trial ended through Tune's controller, and saved as ended (see
    _compat.mark_trial_state)."""
    from . import _compat
    tune_controller.stop_trial(trial)
    _compat.mark_trial_state(tune_controller, trial)


def slot_searcher(tune_controller):
    """Our searcher inside Tune's search algorithm (SearchGenerator, ConcurrencyLimiter: each
    holds the next as `.searcher`), or None."""
    s = tune_controller.search_alg
    while s is not None and not hasattr(s, "waiting"):
        s = getattr(s, "searcher", None)
    return s


def read_records(path: str | Path) -> dict[str, Any]:
    """The rung file's contents, checked; ValueError naming the file and what is wrong."""
    try:
        s = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable rung records ({e})") from e
    if not isinstance(s, dict) or s.get("format") != FORMAT:
        got = s.get("format") if isinstance(s, dict) else type(s).__name__
        raise ValueError(f"{path}: rung records of format {got!r}, this version reads format {FORMAT}; "
                         "resume it with the version that wrote it")
    for key, kind in (("rungs", list), ("recorded", dict), ("promoted", dict), ("paused", dict), ("stopped", dict)):
        if not isinstance(s.get(key), kind):
            raise ValueError(f"{path}: rung records without a valid {key!r}")   # noqa: TRY004 - a bad file, one error type
    return s

