"""Promotion-type ASHA end to end on the session's Ray: trials pause at a rung, the best resume
from their checkpoints, the rest end there, and a resume keeps every rung decision."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SPEC = """
name: {name}
storage_path: {storage}
metric: val_acc
mode: max
seed: 3
reproducible: {reproducible}
budget: {{num_samples: {samples}, max_epochs: 3, grace_epochs: 1, reduction_factor: 3,
          max_concurrent_trials: {concurrency}, asha: promotion}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1}}
search:
  lr: {{type: loguniform, low: 1.0e-4, high: 0.5}}
"""


def _spec(tmp_path: Path, name: str, samples: int, reproducible: bool = False) -> tuple[Path, Path]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, storage=tmp_path / "runs", cache=tmp_path / "cache", samples=samples,
                                reproducible=str(reproducible).lower(), concurrency=1 if reproducible else 2))
    return spec, tmp_path / "runs" / name


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def _epochs(exp_dir: Path) -> dict[str, list[int]]:
    return {f.parent.name.removeprefix("trial_"): [json.loads(line)["epoch"] for line in f.read_text().splitlines()
                                                   if line.strip()]
            for f in exp_dir.glob("trial_*/result.json")}


def _rungs(exp_dir: Path) -> dict:
    return json.loads((exp_dir / "asha-rungs.state").read_text())


def _states(exp_dir: Path) -> dict[str, str]:
    r = _cli("status", str(exp_dir), "--json")
    assert r.returncode == 0, r.stderr
    return {t["trial_id"]: t["state"] for t in json.loads(r.stdout)["trials"]}


def _check_finished(exp_dir: Path, samples: int, interrupted: bool = False) -> dict:
    """Every trial ended; the promoted ones trained on to the last epoch without repeating one,
    the others ended at the rung; nothing is left paused.  After one interrupt a trial may have
    restarted once (`_restarted_once_at_most`): Tune resumes a trial from the last checkpoint it
    had registered, so the epoch running then may run again, and a trial whose pause at the rung
    was still being saved (Tune registers a pausing trial's checkpoint when the save returns,
    after the rung file has it paused) starts over from epoch 1."""
    rungs, epochs = _rungs(exp_dir), _epochs(exp_dir)
    assert set(_states(exp_dir).values()) == {"TERMINATED"}
    recorded, promoted, stopped = rungs["recorded"]["1"], rungs["promoted"]["1"], rungs["stopped"]
    assert len(recorded) == samples, rungs
    assert len(set(promoted)) == len(promoted) and not set(promoted) & set(stopped), rungs
    assert rungs["paused"] == {} and set(promoted) | set(stopped) == set(recorded), rungs
    # The best third at the rung (by val_acc at epoch 1) were all promoted.  Asynchronous ASHA may
    # also have promoted trials that were in the top third of fewer trials, earlier; the first two
    # to arrive paused (floor(2/3) = 0 go on), and at least one trial never made a top third.
    best = sorted(recorded, key=lambda t: -recorded[t])[:samples // 3]
    assert set(best) <= set(promoted) and stopped, rungs
    for tid in promoted:   # resumed from epoch 1's checkpoint
        if interrupted:
            assert _restarted_once_at_most(epochs[tid], 3), (tid, epochs[tid])
        else:
            assert epochs[tid] == [1, 2, 3], (tid, epochs[tid])
    for tid in stopped:
        assert epochs[tid] == [1] or (interrupted and epochs[tid] == [1, 1]), (tid, epochs[tid])
    return rungs


def _restarted_once_at_most(epochs: list[int], last: int) -> bool:
    """Epochs 1..last in order, or in two runs where the second starts again at an epoch the first
    reached or right after it (a restart from an earlier checkpoint, or from scratch)."""
    runs = [[epochs[0]]]
    for e in epochs[1:]:
        if e == runs[-1][-1] + 1:
            runs[-1].append(e)
        else:
            runs.append([e])
    return (len(runs) <= 2 and runs[0][0] == 1 and runs[-1][-1] == last
            and (len(runs) == 1 or runs[1][0] <= runs[0][-1] + 1))


def _decisions(exp_dir: Path) -> dict:
    """The run's proposals and rung decisions, by each trial's drawn lr (Tune's trial ids differ
    between runs): the study's trials in order with their per-epoch values, and the rung file."""
    import optuna

    from tuner.searcher import JOURNAL, journal_storage
    study = optuna.load_study(study_name=exp_dir.name, storage=journal_storage(exp_dir / JOURNAL))
    lr = {tid: json.loads((exp_dir / f"trial_{tid}" / "params.json").read_text())["lr"] for tid in _epochs(exp_dir)}
    rungs = _rungs(exp_dir)
    return {"study": [(t.params["lr"], t.state.name, t.intermediate_values) for t in study.trials],
            "recorded": [(lr[t], v) for t, v in rungs["recorded"]["1"].items()],
            "promoted": [lr[t] for t in rungs["promoted"]["1"]], "stopped": sorted(lr[t] for t in rungs["stopped"])}


@pytest.fixture(scope="module")
def promoted_run(ray_address, tmp_path_factory):
    """One reproducible promotion run (one trial at a time, deterministic training): its folder
    and output.  The warm-start test reuses its folder as the earlier experiment."""
    tmp_path = tmp_path_factory.mktemp("promote")
    spec, exp_dir = _spec(tmp_path, "promote", 6, reproducible=True)
    r = _cli("run", str(spec), "--address", ray_address, timeout=360)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp_path, exp_dir, r


@pytest.mark.timeout(500)
def test_promotion_pauses_promotes_the_best_and_ends_the_rest_at_their_rung(promoted_run, ray_address):
    tmp_path, exp_dir, r = promoted_run
    assert "up to 1 at once" in r.stdout
    rungs = _check_finished(exp_dir, 6)
    # The console says which trials wait, and how each one ended.
    for tid in rungs["stopped"]:
        assert f"trial {tid} paused at epoch 1, waits for a promotion" in r.stdout, r.stdout[-3000:]
        assert f"trial {tid} stopped at rung epoch 1 (not promoted)" in r.stdout, r.stdout[-3000:]
    first = next(iter(rungs["recorded"]["1"]))   # 1 recorded: floor(1/3) = 0 go on, so it paused
    assert f"trial {first} paused at epoch 1" in r.stdout
    if first in rungs["promoted"]["1"]:
        assert f"trial {first} promoted at epoch 1, resumes from its checkpoint" in r.stdout
    summary = json.loads((exp_dir / "summary.json").read_text())
    assert summary["trials"] == 6
    # reproducible: true: a second run with the same seed makes the same proposals and the same
    # rung decisions.
    (tmp_path / "again").mkdir()
    again_spec, again_dir = _spec(tmp_path / "again", "promote", 6, reproducible=True)
    again = _cli("run", str(again_spec), "--address", ray_address, timeout=360)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    first_run, second_run = _decisions(exp_dir), _decisions(again_dir)
    assert first_run == second_run
    assert first_run["promoted"] and first_run["stopped"]   # both kinds of decision were taken


WARM = """
name: {name}
storage_path: {storage}
metric: {metric}
mode: {mode}
seed: 1
budget: {{num_samples: 4, max_epochs: 2, grace_epochs: 1, reduction_factor: 3, max_concurrent_trials: 2}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1}}
search:
  lr: {{type: loguniform, low: 1.0e-4, high: 0.5}}
"""


@pytest.mark.timeout(400)
def test_a_run_warm_started_from_an_earlier_one_holds_its_trials_in_the_study(promoted_run, ray_address):
    import optuna

    from tuner.searcher import JOURNAL, journal_storage
    tmp_path, earlier, _ = promoted_run

    def spec(name, metric="val_acc", mode="max"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(WARM.format(name=name, storage=tmp_path / "runs", cache=tmp_path / "cache", metric=metric,
                                    mode=mode))
        return path
    # Another metric: one error naming it, exit 2, nothing written for the new experiment.
    bad = _cli("run", str(spec("other", "val_loss", "min")), "--address", ray_address, "--warm-start", str(earlier))
    assert bad.returncode == 2 and "same metric and mode" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "runs" / "other").exists()

    before = {p: p.stat().st_mtime_ns for p in earlier.rglob("*")}
    r = _cli("run", str(spec("warm")), "--address", ray_address, "--warm-start", str(earlier))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # The earlier run's 6 trials (2 finished 3 epochs at least, the rest stopped at epoch 1) come
    # in with their epochs moved to the new 2-epoch scale.
    assert f"warm start: 6 trials from {earlier}" in r.stdout, r.stdout[-3000:]
    assert "warm start: epochs rescaled x0.666667 (max_epochs 3 -> 2)" in r.stdout, r.stdout[-3000:]
    study = optuna.load_study(study_name="warm", storage=journal_storage(tmp_path / "runs" / "warm" / JOURNAL))
    warm = [t for t in study.trials if "warm_start" in t.user_attrs]
    new = [t for t in study.trials if "warm_start" not in t.user_attrs]
    assert [t.number for t in warm] == list(range(6)) and len(new) == 4, study.trials   # told first
    old = optuna.load_study(study_name="promote", storage=journal_storage(earlier / JOURNAL))
    assert sorted(t.params["lr"] for t in warm) == sorted(t.params["lr"] for t in old.trials)
    assert all(set(t.intermediate_values) <= {1, 2} for t in warm)
    assert {p: p.stat().st_mtime_ns for p in earlier.rglob("*")} == before   # the earlier folder untouched


@pytest.mark.timeout(600)
def test_a_resumed_promotion_run_keeps_its_rung_decisions(ray_address, tmp_path):
    spec, exp_dir = _spec(tmp_path, "resumed", 6)
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", ray_address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:   # interrupted once trials wait at the rung
            f = exp_dir / "asha-rungs.state"
            if f.is_file() and len(json.loads(f.read_text() or "{}").get("paused", {})) >= 2:
                break
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    before = _rungs(exp_dir)
    assert len(before["paused"]) >= 2, (before, out[-2000:])
    r = _cli("resume", str(exp_dir), "--address", ray_address, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = _check_finished(exp_dir, 6, interrupted=True)
    # What was decided before the interrupt stands: promoted stay promoted (once), ended stay ended.
    assert after["promoted"]["1"][:len(before["promoted"]["1"])] == before["promoted"]["1"]
    assert set(before["stopped"]) <= set(after["stopped"])
    assert after["recorded"]["1"].items() >= before["recorded"]["1"].items()
