"""The run's console: event lines, the progress estimate and the live table (no Ray needed)."""
import io
import pickle
import re
from types import SimpleNamespace

import pytest

from tuner.console import Console, epochs_left
from tuner.text import params_text, sig4


def test_expected_epochs_under_asha():
    # max 9, grace 1, eta 3: rungs at 1 and 3.  A new trial runs 1 epoch, goes on with
    # probability 1/3 for 2 more, then 1/9 for the last 6.
    assert epochs_left(0, 9, 1, 3) == pytest.approx(1 + 2 / 3 + 6 / 9)
    assert epochs_left(1, 9, 1, 3) == pytest.approx(2 + 6 / 3)    # past rung 1, rung 3 ahead
    assert epochs_left(3, 9, 1, 3) == pytest.approx(6)            # past every rung
    assert epochs_left(9, 9, 1, 3) == 0


def test_numbers_at_four_significant_digits():
    assert sig4(0.123456789) == "0.1235" and sig4(1.633e-05) == "1.633e-05" and sig4(64) == "64"
    assert params_text({"lr": 0.0312345, "optimizer": "sgd"}) == "lr=0.03123 optimizer=sgd"


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _trial(tid, path, **config):
    return SimpleNamespace(trial_id=tid, config=config, last_result={}, path=str(path), error_file=None,
                           status="RUNNING")


def _console(stream, clock, tty=False):
    return Console(total=3, metric="val_acc", mode="max", searched=["lr", "optimizer"], max_epochs=9,
                   grace_epochs=1, reduction_factor=3, stream=stream, tty=tty, clock=clock, redraw_s=0)


def test_one_line_per_event_with_progress_metric_and_best(tmp_path):
    out, clock = io.StringIO(), Clock()
    c = _console(out, clock)
    a, b, e = (_trial("a1", tmp_path / "trial_a1", lr=0.0123456, optimizer="sgd"),
               _trial("b2", tmp_path / "trial_b2", lr=0.2, optimizer="adamw"),
               _trial("e3", tmp_path / "trial_e3", lr=0.05, optimizer="sgd"))
    for t in (a, b, e):
        c.on_trial_start(0, [], t)
    clock.t += 10
    for ep in (1, 2, 3):
        a.last_result = {"epoch": ep, "status": "ok", "val_acc": 0.5 + ep / 10, "samples_per_s": 1234.5678}
        c.on_trial_result(0, [], a, a.last_result)
    b.last_result = {"epoch": 1, "status": "ok", "val_acc": 0.1}
    c.on_trial_result(0, [], b, b.last_result)
    c.on_trial_complete(0, [], b)                       # epoch 1 of 9, status ok: ASHA stopped it
    a.last_result = {"epoch": 9, "status": "ok", "val_acc": 0.987654}
    c.on_trial_result(0, [], a, a.last_result)
    c.on_trial_complete(0, [], a)
    (tmp_path / "trial_e3").mkdir()
    (tmp_path / "trial_e3" / "error.txt").write_text("Traceback ...\n  File x\nValueError: the data is gone\n")
    c.on_trial_error(0, [], e)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6, lines                       # three starts, three ends; no per-result lines
    assert lines[0].startswith("[0/3 done 0:00 ~? left] trial a1 started | lr=0.01235 optimizer=sgd")
    assert "trial b2 stopped by ASHA at epoch 1 | val_acc 0.1 (best 0.1)" in lines[3]
    assert lines[3].startswith("[1/3 done 0:10 ")
    assert "trial a1 finished 9 epochs | val_acc 0.9877 (best 0.9877)" in lines[4]
    assert lines[4].startswith("[2/3 done 0:10 ")
    assert "trial e3 errored | ValueError: the data is gone; error file: " + str(tmp_path / "trial_e3" / "error.txt") \
        in lines[5]
    assert lines[5].startswith("[3/3 done 0:10 ~0:00 left]")


def test_remaining_time_is_elapsed_times_epochs_left_over_epochs_done(tmp_path):
    out, clock = io.StringIO(), Clock()
    c = _console(out, clock)
    a = _trial("a1", tmp_path, lr=0.1, optimizer="sgd")
    c.on_trial_start(0, [], a)
    clock.t += 60
    c.on_trial_result(0, [], a, {"epoch": 1, "status": "ok", "val_acc": 0.5})
    # done: 1 trial-epoch in 60 s; left: a1 past rung 1 (2 + 6/3 = 4) and 2 new trials (2 x 7/3)
    left = 60 * (4 + 2 * (1 + 2 / 3 + 6 / 9)) / 1
    m = re.match(r"\[0/3 done 1:00 ~(\d+):(\d\d) left\]", c.progress())
    assert m and int(m[1]) * 60 + int(m[2]) == round(left), c.progress()


def test_diverged_and_infeasible_trials_say_so_with_their_reason(tmp_path):
    out = io.StringIO()
    c = _console(out, Clock())
    t = _trial("d1", tmp_path, lr=0.4, optimizer="sgd")
    c.on_trial_start(0, [], t)
    t.last_result = {"epoch": 2, "status": "diverged", "reason": "5 consecutive steps had a non-finite loss",
                     "val_acc": 0.0}
    c.on_trial_complete(0, [], t)
    assert "trial d1 diverged at epoch 2: 5 consecutive steps had a non-finite loss | val_acc 0 (best -)" \
        in out.getvalue().splitlines()[-1]
    t2 = _trial("o2", tmp_path, lr=0.1, optimizer="sgd")
    t2.last_result = {"epoch": 1, "status": "infeasible", "reason": "out of memory: CUDA out of memory", "val_acc": 0.0}
    c.on_trial_complete(0, [], t2)
    assert "trial o2 infeasible at epoch 1: out of memory: CUDA out of memory" in out.getvalue().splitlines()[-1]


def test_terminal_table_redrawn_in_place(tmp_path):
    out = io.StringIO()
    c = _console(out, Clock(), tty=True)
    a = _trial("a1", tmp_path, lr=0.0123456, optimizer="sgd")
    c.on_trial_start(0, [], a)
    c.on_trial_result(0, [], a, {"epoch": 1, "status": "ok", "val_acc": 0.91234, "samples_per_s": 1234.5678})
    text = out.getvalue()
    # The second drawing first moves up over the first one (header, 1 row, progress) and clears it.
    assert "\x1b[3F\x1b[J" in text
    last = text.rsplit("\x1b[J", 1)[1].splitlines()
    assert last[0].split() == ["trial", "state", "status", "epoch", "val_acc", "samples/s", "lr", "optimizer"]
    assert last[1].split() == ["a1", "RUNNING", "ok", "1", "0.9123", "1235", "0.01235", "sgd"]
    assert last[2].startswith("[0/3 done")


def test_console_survives_the_pickle_tune_makes_for_resume():
    c = _console(None, Clock())
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.total == 3 and c2.stream is not None
