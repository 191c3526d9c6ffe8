"""The console of a run: one line per trial event and, on a terminal, a compact table redrawn
in place.  A Tune callback; Tune's own output is off (verbose=0) unless `--verbose`.

Event lines carry the progress (trials done / total, elapsed, an estimate of the time left)
and the metric with the best so far.  The estimate is elapsed x the trial-epochs still
expected under ASHA / the trial-epochs done: a trial at epoch e goes on past each rung ahead
of it with probability 1/eta.
"""
from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ray.tune import Callback

from .schema import asha_rungs
from .text import clock_text, finite, last_line, params_text, sig4

# Loggers whose INFO lines are chatter during a run (shown with --verbose).
CHATTY = ("ray", "ray.tune", "ray.train", "ray.data", "optuna")
# Loggers that repeat, with a traceback, a trial error the console already names with its
# error file ("Trial task failed", "Trials did not complete").
REPEATS = ("ray.tune.execution.tune_controller", "ray.tune.tune")


def quiet_logs(verbose: bool) -> None:
    """Ray's and Optuna's INFO lines off unless verbose; warnings and errors stay, except the
    ones the console prints itself (Tune's output engine: trainables.settings.driver_env)."""
    level = logging.INFO if verbose else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(level)
    for name in REPEATS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    import optuna
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.WARNING)


def epochs_left(epoch: int, max_t: int, grace: int, eta: float) -> float:
    """Expected epochs still to run for a trial now at `epoch` (0: not started) under ASHA."""
    left, p, at = 0.0, 1.0, epoch
    for r in asha_rungs(max_t, grace, eta):
        if r <= epoch:
            continue  # a running trial at or past a rung has passed it
        left += p * (r - at)
        p, at = p / eta, r
    return left + p * max(0, max_t - at)


class Console(Callback):
    """Prints trial events (and a live table on a terminal) for one experiment."""

    def __init__(self, *, total: int, metric: str, mode: str, searched: list[str], max_epochs: int,
                 grace_epochs: int, reduction_factor: float, stream: TextIO | None = None,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic, redraw_s: float = 1.0):
        self.total, self.metric, self.mode, self.searched = total, metric, mode, list(searched)
        self.max_epochs, self.grace, self.eta = max_epochs, grace_epochs, reduction_factor
        self.stream_given, self.tty_given = stream, tty
        self.clock, self.redraw_s = clock, redraw_s
        self.t0 = clock()
        self.rows: dict[str, dict[str, Any]] = {}   # trial id -> state, status, epoch, metric, samples/s, params
        self.ended: set[str] = set()
        self.best: float | None = None
        self.drawn = 0          # table lines on screen now
        self.last_draw = -math.inf

    # Tune pickles its callbacks with the experiment (for resume): no stream in the state.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["stream_given"] = None
        state.pop("_stream", None)
        return state

    def __setstate__(self, state):
        from . import _compat
        self.__dict__.update(_compat.console_state(state))

    @property
    def stream(self) -> TextIO:
        return self.stream_given or sys.stdout

    @property
    def tty(self) -> bool:
        return self.stream.isatty() if self.tty_given is None else self.tty_given

    # ------------------------------------------------------------ Tune's hooks

    def setup(self, **info):
        self.t0, self.drawn, self.last_draw = self.clock(), 0, -math.inf  # also on resume

    def on_step_begin(self, iteration, trials, **info):
        for t in trials:  # trials that ended before a resume count as done
            if t.trial_id not in self.rows and t.status in ("TERMINATED", "ERROR"):
                last = t.last_result or {}
                self.row(t).update(state=t.status, status=str(last.get("status", "")),
                                    epoch=int(last.get("epoch", 0) or 0), value=last.get(self.metric),
                                    sps=last.get("samples_per_s"))
                self.ended.add(t.trial_id)
            elif t.status == "PAUSED" and t.trial_id in self.rows and self.rows[t.trial_id]["state"] == "RUNNING":
                row = self.rows[t.trial_id]   # promotion-type ASHA: it waits at a rung
                row["state"] = "PAUSED"
                self.event(t, f"paused at epoch {row['epoch']}, waits for a promotion", self.metric_text(row))

    def on_trial_start(self, iteration, trials, trial, **info):
        row = self.row(trial)
        was = row["state"]
        row["state"] = "RUNNING"
        if was == "PAUSED":
            self.event(trial, f"promoted at epoch {row['epoch']}, resumes from its checkpoint", "")
        else:
            self.event(trial, "started", params_text(row["params"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        row = self.row(trial)
        row.update(epoch=int(result.get("epoch", row["epoch"]) or 0), status=str(result.get("status", "")),
                   value=result.get(self.metric), sps=result.get("samples_per_s"))
        if self.tty and self.clock() - self.last_draw >= self.redraw_s:
            self.redraw()

    def on_trial_complete(self, iteration, trials, trial, **info):
        row = self.row(trial)
        was, row["state"] = row["state"], "TERMINATED"
        last = trial.last_result or {}
        status, epoch = str(last.get("status", row["status"])), int(last.get("epoch", row["epoch"]) or 0)
        row.update(status=status, epoch=epoch, value=last.get(self.metric, row["value"]))
        if status and status != "ok":
            what = f"{status} at epoch {epoch}: {last.get('reason', '')}".rstrip(": ")
        elif epoch < self.max_epochs and was == "PAUSED":
            what = f"stopped at rung epoch {epoch} (not promoted)"
        elif epoch < self.max_epochs:
            what = f"stopped by ASHA at epoch {epoch}"
        else:
            what = f"finished {epoch} epochs"
        self.ended.add(trial.trial_id)
        v = last.get(self.metric)
        better = self.best is None or (v > self.best if self.mode == "max" else v < self.best)
        if status == "ok" and finite(v) and better:   # as the summary: last values
            self.best = float(v)
        self.event(trial, what, self.metric_text(row))

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.event(trial, "failed, retrying from its last checkpoint", self.error_text(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.row(trial)["state"] = "ERROR"
        self.ended.add(trial.trial_id)
        self.event(trial, "errored", self.error_text(trial))

    def on_experiment_end(self, trials, **info):
        if self.tty:
            self.redraw()

    # ------------------------------------------------------------ text

    def row(self, trial) -> dict[str, Any]:
        row = self.rows.get(trial.trial_id)
        if row is None:
            row = self.rows[trial.trial_id] = {
                "state": "PENDING", "status": "", "epoch": 0, "value": None, "sps": None,
                "params": {k: trial.config.get(k) for k in self.searched if k in trial.config}}
        return row

    def metric_text(self, row: dict[str, Any]) -> str:
        best = "-" if self.best is None else sig4(self.best)
        return f"{self.metric} {sig4(row['value']) if row['value'] is not None else '-'} (best {best})"

    @staticmethod
    def error_text(trial) -> str:
        """The error's last line (the exception) and the error file inside the experiment folder."""
        text = ""
        for f in (getattr(trial, "error_file", None), Path(trial.path) / "error.txt" if trial.path else None):
            if f and Path(f).is_file():
                text = Path(f).read_text(errors="replace")
                break
        reason = last_line(text) if text.strip() else "see the error file"
        where = Path(trial.path) / "error.txt" if trial.path else None
        return f"{reason[:300]}" + (f"; error file: {where}" if where else "")

    def progress(self) -> str:
        elapsed = self.clock() - self.t0
        done_epochs = sum(r["epoch"] for r in self.rows.values())
        left = sum(epochs_left(r["epoch"], self.max_epochs, self.grace, self.eta)
                   for tid, r in self.rows.items() if tid not in self.ended)
        left += max(0, self.total - len(self.rows)) * epochs_left(0, self.max_epochs, self.grace, self.eta)
        eta = f"~{clock_text(elapsed * left / done_epochs)} left" if done_epochs else "~? left"
        return f"[{len(self.ended)}/{self.total} done {clock_text(elapsed)} {eta}]"

    def event(self, trial, what: str, detail: str) -> None:
        self.erase()
        self.write(f"{self.progress()} trial {trial.trial_id} {what}" + (f" | {detail}" if detail else ""))
        if self.tty:
            self.redraw()

    def table(self) -> list[str]:
        head = ["trial", "state", "status", "epoch", self.metric, "samples/s", *self.searched]
        body = [[tid, r["state"], r["status"] or "-", str(r["epoch"]),
                 sig4(r["value"]) if r["value"] is not None else "-", sig4(r["sps"]) if r["sps"] is not None else "-",
                 *(sig4(r["params"].get(k, "-")) for k in self.searched)] for tid, r in self.rows.items()]
        widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
        return ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]

    def erase(self) -> None:
        if self.tty and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")  # up to the table's first line, clear below
            self.drawn = 0

    def redraw(self) -> None:
        self.erase()
        lines = self.table() + [self.progress()]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self.drawn, self.last_draw = len(lines), self.clock()

    def write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
