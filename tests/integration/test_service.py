"""The tuning service end to end on the session's shared local Ray."""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import fault_plugin
import pytest
import torch
from ray_helpers import dashboard_json, interrupt_when

from tuner.config import parse

pytestmark = pytest.mark.integration

SMALL = """
name: small
storage_path: {storage}
metric: val_acc
mode: max
seed: 0
budget: {{num_samples: 9, max_epochs: 3, grace_epochs: 1, reduction_factor: 3, max_concurrent_trials: 1}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1,
         max_nonfinite_steps: 2}}
search:
  lr: {{type: loguniform, low: 1.0e-3, high: 0.3}}
  micro_batch_size: {{type: choice, values: [32, 64]}}
  label_smoothing: {{type: choice, values: [0.0, 0.0, 0.0, 0.0, {diverging}]}}
"""
DIVERGING = 0.0123   # the trials drawing this label_smoothing get a NaN loss (tests/fault_plugin.py)


@pytest.fixture(scope="module")
def small_run(ray_address, tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    text = SMALL.format(storage=root / "runs", cache=root / "cache", diverging=DIVERGING)
    (root / "small.yaml").write_text(text)
    r = _cli("run", str(root / "small.yaml"), "--address", ray_address, timeout=540,
             env=fault_plugin.env(inject="nan_loss", when={"label_smoothing": DIVERGING}))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exp = parse(text)
    return exp, json.loads((exp.exp_dir / "summary.json").read_text())


def _results(exp):
    from tuner.results import trials
    return trials(exp)


@pytest.mark.timeout(600)
def test_search_reaches_its_metric_and_asha_stops_early(small_run):
    exp, summary = small_run
    assert summary["trials"] == 9 and summary["best"]["value"] >= 0.9
    rows = _results(exp)
    stopped = [r for r in rows if r.status == "ok" and r.epoch < exp.budget.max_epochs]
    assert stopped, [(r.trial_id, r.status, r.epoch) for r in rows]


def _study(exp):
    from tuner.searcher import FidelitySearcher
    s = FidelitySearcher(max_epochs=exp.budget.max_epochs)
    s.restore_from_dir(str(exp.exp_dir))
    return s.study


def test_optuna_study_holds_pruned_complete_and_failed(small_run):
    from optuna.trial import TrialState
    exp, _ = small_run
    study = _study(exp)
    by_state = {}
    for t in study.trials:
        by_state.setdefault(t.state, []).append(t)
    assert TrialState.PRUNED in by_state and TrialState.COMPLETE in by_state and TrialState.FAIL in by_state, \
        {s.name: len(v) for s, v in by_state.items()}
    for t in by_state[TrialState.PRUNED]:
        assert t.intermediate_values and max(t.intermediate_values) < exp.budget.max_epochs
    for t in by_state[TrialState.COMPLETE]:
        assert t.value == t.intermediate_values[exp.budget.max_epochs] and math.isfinite(t.value)
    for t in by_state[TrialState.FAIL]:
        assert t.params["label_smoothing"] == DIVERGING and t.value is None
    assert not any(t.state == TrialState.RUNNING for t in study.trials)


def test_the_study_journal_opens_with_optuna_alone(small_run):
    import optuna

    from tuner.searcher import JOURNAL, journal_storage
    exp, _ = small_run
    study = optuna.load_study(study_name=exp.name, storage=journal_storage(exp.exp_dir / JOURNAL))
    # What optuna-dashboard shows is what Tune ran: every trial's searched values, in a final state.
    ran = sorted(sorted(row.params.items()) for row in _results(exp))
    assert sorted(sorted(t.params.items()) for t in study.trials) == ran
    assert len(study.trials) == 9 and not any(t.state == optuna.trial.TrialState.RUNNING for t in study.trials)


def test_each_trial_folder_holds_one_tensorboard_run_with_our_tags_and_hparams(small_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tuner.tensorboard import TAGS
    exp, _ = small_run
    folders = sorted(p.parent for p in exp.exp_dir.glob("*/result.json"))
    assert len(folders) == 9
    expected = {TAGS[k] for k in ("train_loss", "train_acc", "val_loss", "val_acc", "lr", "samples_per_s", "sparsity")}
    expected |= {f"hparam/{exp.metric}", "hparam/epoch"}   # the HParams tab's metrics, at the trial's end
    for folder in folders:
        assert not [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("checkpoint_")], \
            list(folder.iterdir())                  # no timestamped hparams subfolder
        acc = EventAccumulator(str(folder))
        acc.Reload()
        assert set(acc.Tags()["scalars"]) == expected, acc.Tags()["scalars"]   # no ray/tune/* duplicates
        epochs = [json.loads(line)["epoch"] for line in (folder / "result.json").read_text().splitlines()]
        assert [e.step for e in acc.Scalars("val/acc")] == epochs
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hparams = HParamsPluginData.FromString(content).session_start_info.hparams
        assert set(hparams) == set(exp.search), set(hparams)   # the searched settings, nothing else


def test_diverged_trial_reports_a_finite_worst_value(small_run):
    exp, _ = small_run
    diverged = [r for r in _results(exp) if r.status == "diverged"]
    assert diverged and all(r.metrics["val_acc"] == 0.0 and math.isfinite(r.metrics["val_loss"]) for r in diverged)


def test_export_models_recompute_the_reported_accuracy(small_run, tmp_path):
    from trainables.config import TrainConfig
    from tuner.export import accuracy, eval_batches, export
    exp, _summary = small_run
    m = export(exp.exp_dir, tmp_path / "best")
    assert m["val_acc"] == m["reported"]["val_acc"] and 0 < m["test_acc"] <= 1
    for name in ("best_config.yaml", "checkpoint.pt", "model.pt", "model.pt2", "model.ts", "metrics.json"):
        assert (tmp_path / "best" / name).is_file(), name
    cfg = TrainConfig.from_dict(torch.load(tmp_path / "best" / "checkpoint.pt", weights_only=True)["config"])
    (val,) = eval_batches(cfg, "val")
    ts = torch.jit.load(str(tmp_path / "best" / "model.ts"))
    pt2 = torch.export.load(str(tmp_path / "best" / "model.pt2")).module()
    assert accuracy(ts, val) == m["reported"]["val_acc"]
    assert accuracy(pt2, val) == m["reported"]["val_acc"]


def test_export_refuses_a_corrupt_checkpoint_and_writes_nothing(small_run, tmp_path, capsys):
    from trainables.runtime import checkpoint as ckpt_io
    from tuner.cli import main
    from tuner.results import select, trials
    exp, _ = small_run
    path = Path(select(exp, trials(exp)).checkpoint) / ckpt_io.FILENAME
    good = path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x01
    try:
        path.write_bytes(bytes(bad))
        rc = main(["export", str(exp.exp_dir), "--out", str(tmp_path / "best")])
    finally:
        path.write_bytes(good)  # the module's other tests share this experiment
    err = capsys.readouterr().err
    assert rc == 2 and "is corrupt" in err and "Traceback" not in err, err
    assert not (tmp_path / "best").exists() or not any((tmp_path / "best").iterdir())


def _cli(*args, cwd=None, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


def test_status_json_lists_every_trial(small_run):
    exp, _ = small_run
    r = _cli("status", str(exp.exp_dir), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert len(data["trials"]) == 9 and data["best"]


def test_exported_config_trains_again(small_run, tmp_path):
    exp, _ = small_run
    from tuner.export import export
    export(exp.exp_dir, tmp_path / "b")
    r = _cli("train", str(tmp_path / "b" / "best_config.yaml"), "--set", "epochs=1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["status"] == "ok"


@pytest.mark.timeout(600)
def test_two_worker_ddp_trial_through_torchtrainer(ray_address, tmp_path):
    # The CIFAR smoke experiment on synthetic images of CIFAR's shape: the driver refuses CIFAR
    # files that are not the published ones, and none can be downloaded here.
    cache = tmp_path / "cache"
    spec = Path(__file__).resolve().parents[2] / "search_spaces" / "cifar-smoke.yaml"
    r = _cli("run", str(spec), "--address", ray_address, "--set", "train.dataset=synthetic",
             "--set", "train.synthetic_size=80", "--set", f"train.cache_dir={cache}",
             "--set", f"storage_path={tmp_path / 'runs'}", "--set", "resources.ddp=train", timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exp_dir = tmp_path / "runs" / "cifar10-smoke"
    summary = json.loads((exp_dir / "summary.json").read_text())
    assert summary["trials"] == 1 and not summary["errors"] and summary["best"]["epoch"] == 2
    from tuner.experiment import load_saved
    from tuner.results import trials
    row = trials(load_saved(exp_dir))[0]
    assert row.status == "ok" and row.metrics["global_batch_size"] == 16  # 8 per worker x 2 workers
    assert row.checkpoint and Path(row.checkpoint, "checkpoint.pt").is_file()
    # The dashboard: the trial's Train run in the Train view, and the actor its results name.
    # Train's state actor takes the controller's updates as they come (it can lag on two busy
    # cores); Tune ends the trial as soon as its last result arrives, so the run ends ABORTED
    # rather than FINISHED in this view.  Either way it is over and lists its workers.
    # The Train view asks the state actor; on a busy machine one answer took over 30 s (seen in a
    # random-order run): a slow answer counts as "not yet", within the deadline.
    deadline = time.monotonic() + 120
    while True:
        try:
            runs = dashboard_json(os.environ["TUNER_TEST_DASHBOARD_URL"], "/api/train/v2/runs/v1")["train_runs"]
        except TimeoutError:
            assert time.monotonic() < deadline, "the dashboard's Train view did not answer"
            continue
        run = next((x for x in runs if x["name"] == f"train-{row.trial_id}"), None)
        if run is not None and run["status"] in ("FINISHED", "ABORTED") and run["attempts"][-1]["workers"]:
            break
        assert time.monotonic() < deadline, (run or {}).get("status", [x["name"] for x in runs])
        time.sleep(1)
    actor = row.metrics["actor_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", actor), actor
    workers = {w["world_rank"]: w["actor_id"] for w in run["attempts"][-1]["workers"]}
    assert workers.get(0) == actor and len(workers) == 2, workers      # rank 0 reports to Tune
    found = dashboard_json(os.environ["TUNER_TEST_DASHBOARD_URL"], f"/api/v0/actors?filter_keys=actor_id&filter_predicates=%3D&filter_values={actor}&detail=1")
    actors = found["data"]["result"]["result"]
    assert [a["actor_id"] for a in actors] == [actor] and actors[0]["class_name"] == "RayTrainWorker", actors
    s = _cli("status", str(exp_dir))
    assert s.returncode == 0 and actor in s.stdout, s.stdout


def _fault_spec(tmp_path: Path, name: str, *, seed: int, samples: int, epochs: int, workers: int = 1,
                width: float = 1.0, micro_batch: int = 16, hold_epoch: int | None = None,
                fault: str = "") -> tuple[Path, Path, dict[str, str]]:
    """A small digits experiment (its spec file), its fault folder and the environment that
    makes its trials load tests/fault_plugin.py; with hold_epoch, every trial pauses before
    that epoch until the test removes `faults/hold`."""
    faults = tmp_path / "faults"
    faults.mkdir()
    if hold_epoch:
        (faults / "hold").write_text(str(hold_epoch))
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""
name: {name}
storage_path: {tmp_path / "runs"}
seed: {seed}
budget: {{num_samples: {samples}, max_epochs: {epochs}, grace_epochs: {epochs}, max_concurrent_trials: 1}}
resources: {{workers: {workers}, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {tmp_path / "cache"}, model: convnet, width: {width}, micro_batch_size: {micro_batch},
         flip: false, crop_padding: 1}}
search:
  lr: {{type: loguniform, low: 1.0e-2, high: 0.1}}
""")
    return spec, faults, fault_plugin.env(dir=faults, inject=fault)


def _rows_by_trial(exp_dir: Path) -> dict[str, list[dict]]:
    return {f.parent.name: [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            for f in exp_dir.glob("*/result.json")}


def _epochs_by_trial(exp_dir: Path) -> dict[str, list[int]]:
    return {name: [r["epoch"] for r in rows] for name, rows in _rows_by_trial(exp_dir).items()}


def _start_run(spec: Path, ray_address: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", ray_address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})


def _wait_until(proc: subprocess.Popen, ready, wait_s: float = 300, show=lambda: ""):
    """Poll ready() until it returns something truthy (returned); fails if `proc` ends first.
    show() says what the test saw, for the failure message."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        got = ready()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"`tuner run` ended (rc {proc.returncode}) before the awaited state:\n"
                        + proc.stdout.read()[-3000:])
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the awaited state did not come within {wait_s} s; {show()}\n" + proc.communicate()[0][-4000:])


def _interrupt(proc: subprocess.Popen) -> tuple[str, float]:
    """Ctrl-C; the run's output and the seconds it took to stop."""
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    return out, time.time() - t0


def _held_at(exp_dir: Path, epoch: int):
    """A trial that reported `epoch` - 1 epochs and now waits (faults/hold) before `epoch`."""
    return lambda: any(e == list(range(1, epoch)) for e in _epochs_by_trial(exp_dir).values())


@pytest.mark.timeout(600)
def test_resume_after_interrupt_finishes_every_trial_without_restarting(ray_address, tmp_path):
    spec, faults, env = _fault_spec(tmp_path, "resumable", seed=1, samples=3, epochs=4, hold_epoch=3)
    exp_dir = tmp_path / "runs" / "resumable"
    proc = _start_run(spec, ray_address, env)
    try:
        _wait_until(proc, _held_at(exp_dir, 3))  # the first trial has two epochs and checkpoints
        out, took = _interrupt(proc)
    finally:
        proc.kill()
    before = _epochs_by_trial(exp_dir)
    assert list(before.values()) == [[1, 2]], (before, out[-2000:])
    assert took < 60 and proc.returncode == 130, (took, proc.returncode)
    assert f"python -m tuner resume {exp_dir}" in out, out[-2000:]
    (faults / "hold").unlink()
    r = _cli("resume", str(exp_dir), "--address", ray_address, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = _epochs_by_trial(exp_dir)
    assert len(after) == 3, after
    for name, epochs in after.items():
        assert epochs == sorted(set(epochs)), (name, epochs)  # no epoch run twice: never back to epoch 1
        assert epochs[-1] == 4, (name, epochs)
    (name,) = before
    assert after[name] == [1, 2, 3, 4], after[name]
    # Each trial keeps its best two checkpoints by the metric and its latest.
    for name, rows in _rows_by_trial(exp_dir).items():
        _assert_keeps_the_best_two_and_the_latest(rows, set(_kept(exp_dir / name)))
    from tuner.experiment import load_saved
    from tuner.results import trials
    assert sorted(row.state for row in trials(load_saved(exp_dir))) == ["TERMINATED"] * 3


def test_run_refuses_a_trial_the_cluster_cannot_hold(ray_address, tmp_path):
    spec = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"
    r = _cli("run", str(spec), "--address", ray_address, "--set", "resources.gpus_per_worker=1",
             "--set", f"storage_path={tmp_path / 'runs'}", timeout=120)
    assert r.returncode == 2 and "needs 1 GPU" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "runs" / "quickstart").exists()


def _kept(folder: Path) -> dict[int, str]:
    """The checkpoints kept in a trial's or Train run's folder: epoch -> the SHA-256 of its weights."""
    from trainables.runtime import checkpoint as ckpt_io
    out = {}
    for f in folder.glob("checkpoint_*/checkpoint.pt"):
        try:
            payload = ckpt_io.load(f)
        except (ckpt_io.CheckpointError, OSError):  # being written or removed right now
            continue
        out[int(payload["epoch"])] = payload["weights_sha256"]
    return out


def _ddp_checkpoints(exp_dir: Path) -> dict[int, str]:
    """A DDP trial's kept checkpoints: in its trial folder (ranks started by the trial), or in
    its Train run's folder (Ray Train)."""
    runs = [*(exp_dir / "train-runs").glob("train-*"), *exp_dir.glob("trial_*")]
    return {e: h for run in runs for e, h in _kept(run).items()}


def _assert_keeps_the_best_two_and_the_latest(rows: list[dict], kept: set[int]) -> None:
    """Kept: the latest epoch's checkpoint and the two best by val_acc (ties make the epochs
    ambiguous, not the values)."""
    acc = {r["epoch"]: r["val_acc"] for r in rows}
    assert max(acc) in kept and len(kept) <= 3, (acc, kept)
    assert sorted((acc[e] for e in kept), reverse=True)[:2] == sorted(acc.values(), reverse=True)[:2], (acc, kept)


@pytest.mark.timeout(600)
def test_a_killed_rank_and_a_ctrl_c_both_resume_the_ddp_trial_from_its_last_checkpoint(ray_address, tmp_path):
    # One DDP experiment (its ranks started by the trial: resources.ddp auto on one node) for
    # two faults: rank 1 killed before epoch 3, then Ctrl-C before epoch 4 and `resume`.
    spec, faults, env = _fault_spec(tmp_path, "ddp-resumable", seed=1, samples=1, epochs=5, workers=2, hold_epoch=3)
    exp_dir = tmp_path / "runs" / "ddp-resumable"
    proc = _start_run(spec, ray_address, env)
    try:
        _wait_until(proc, _held_at(exp_dir, 3))
        saved = _wait_until(proc, lambda: _ddp_checkpoints(exp_dir).get(2))
        victim = int((faults / "rank1.pid").read_text())
        os.kill(victim, signal.SIGKILL)  # rank 1, waiting before epoch 3
        # The restarted group writes new pid files; only then may epoch 3 start.
        _wait_until(proc, lambda: int((faults / "rank1.pid").read_text()) != victim)
        (faults / "hold").write_text("4")
        _wait_until(proc, _held_at(exp_dir, 4), show=lambda: (
            f"epochs {_epochs_by_trial(exp_dir)}, checkpoints {sorted(_ddp_checkpoints(exp_dir))}, "
            f"fault files {sorted(p.name for p in faults.iterdir())}"))
        out, took = _interrupt(proc)
    finally:
        proc.kill()
    assert "resources.ddp: local" in out and not (exp_dir / "train-runs").exists(), out[-2000:]
    (rows,) = _rows_by_trial(exp_dir).values()
    # No epoch reported twice; the first one after the rank restart follows the last
    # checkpoint, and the weights it started from are the ones that checkpoint saved.
    assert [r["epoch"] for r in rows] == [1, 2, 3] and took < 60, ([r["epoch"] for r in rows], took, out[-2000:])
    assert rows[1]["resumed_from_epoch"] == 0
    assert rows[2]["resumed_from_epoch"] == 2 and rows[2]["restored_weights_sha256"] == saved, rows[2]
    (faults / "hold").unlink()
    r = _cli("resume", str(exp_dir), "--address", ray_address, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (rows,) = _rows_by_trial(exp_dir).values()
    # After the resume the trial goes on from its latest checkpoint (epoch 3).
    assert [(r["epoch"], r["resumed_from_epoch"]) for r in rows] == [(1, 0), (2, 0), (3, 2), (4, 3), (5, 3)], \
        [(r["epoch"], r["resumed_from_epoch"]) for r in rows]
    assert rows[-1]["status"] == "ok"
    # The trial keeps its best two checkpoints by the metric and its latest, not one per epoch.
    _assert_keeps_the_best_two_and_the_latest(rows, set(_ddp_checkpoints(exp_dir)))


ALL_DIVERGE_DDP = """
name: all-diverge
storage_path: {storage}
seed: 2
budget: {{num_samples: 5, max_epochs: 2, grace_epochs: 2, max_concurrent_trials: 1}}
resources: {{workers: 2, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, micro_batch_size: 32, flip: false,
         crop_padding: 1, max_nonfinite_steps: 2}}
search:
  lr: {{type: loguniform, low: 1.0e-2, high: 0.1}}
"""


@pytest.mark.timeout(600)
def test_five_diverging_ddp_trials_end_diverged_without_a_rank_aborting_and_export_refuses(ray_address, tmp_path):
    spec = tmp_path / "diverge.yaml"
    spec.write_text(ALL_DIVERGE_DDP.format(storage=tmp_path / "runs", cache=tmp_path / "cache"))
    r = _cli("run", str(spec), "--address", ray_address, timeout=540, env=fault_plugin.env(inject="nan_loss"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exp_dir = tmp_path / "runs" / "all-diverge"
    from tuner.experiment import load_saved
    from tuner.results import trials
    rows = trials(load_saved(exp_dir))
    assert len(rows) == 5 and all(row.state == "TERMINATED" and row.status == "diverged" for row in rows), \
        [(row.trial_id, row.state, row.status) for row in rows]
    # One report per trial: a rank that aborted would have made Ray Train restart the workers.
    assert all(eps == [1] for eps in _epochs_by_trial(exp_dir).values()), _epochs_by_trial(exp_dir)
    assert not json.loads((exp_dir / "summary.json").read_text())["errors"]
    st = _cli("status", str(exp_dir), "--json")
    assert all("non-finite loss" in t["reason"] for t in json.loads(st.stdout)["trials"]), st.stdout
    e = _cli("export", str(exp_dir), "--out", str(tmp_path / "best"))
    assert e.returncode == 2 and "no trial finished an epoch with status ok" in e.stderr, e.stderr


@pytest.mark.timeout(600)
def test_a_killed_trial_actor_is_retried_from_its_checkpoint(ray_address, tmp_path):
    spec, faults, env = _fault_spec(tmp_path, "killable", seed=3, samples=1, epochs=4, hold_epoch=3)
    exp_dir = tmp_path / "runs" / "killable"
    proc = _start_run(spec, ray_address, env)
    try:
        _wait_until(proc, _held_at(exp_dir, 3))
        (rows,) = _rows_by_trial(exp_dir).values()
        killed_pid = rows[-1]["pid"]
        os.kill(killed_pid, signal.SIGKILL)   # the trial's own actor process
        (faults / "hold").unlink()
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:]
    (rows,) = _rows_by_trial(exp_dir).values()
    # A new process took the trial over and went on from its latest checkpoint (every epoch
    # writes one), never from epoch 1.
    assert [(r["epoch"], r["pid"] == killed_pid) for r in rows] == [(1, True), (2, True), (3, False), (4, False)], \
        [(r["epoch"], r["pid"]) for r in rows]
    assert rows[2]["resumed_from_epoch"] == 2
    from tuner.experiment import load_saved
    from tuner.results import trials
    (row,) = trials(load_saved(exp_dir))
    assert row.state == "TERMINATED" and row.status == "ok", (row.state, row.status)


@pytest.mark.timeout(600)
def test_a_killed_run_leaves_no_ray_behind_after_resume_and_loses_no_trial(ray_address, tmp_path):
    import psutil
    import ray

    from tuner.local_ray import RECORD
    spec, faults, plugin = _fault_spec(tmp_path, "killed-run", seed=4, samples=2, epochs=3, width=0.5, micro_batch=32,
                                       hold_epoch=2)
    exp_dir = tmp_path / "runs" / "killed-run"
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **plugin}
    # No --address: the run starts (and records) its own local Ray beside the suite's.
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_until(proc, _held_at(exp_dir, 2))
        rec = json.loads((exp_dir / RECORD).read_text())
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        proc.kill()

    def alive():
        out = []
        for pid, started, name in rec["processes"]:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - started) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append((pid, name))
            except psutil.Error:
                pass
        return out
    time.sleep(3)
    left = alive()
    assert left, "nothing of the killed run's Ray outlived it: this test would not show the clean-up"
    (faults / "hold").unlink()
    r = _cli("resume", str(exp_dir), "--address", ray_address, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "leftover process" in r.stdout and not alive(), (alive(), r.stdout[-2000:])
    assert not (exp_dir / RECORD).exists()
    # The suite's own Ray was not touched.
    assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=60) == 42
    from tuner.experiment import load_saved
    from tuner.results import trials
    rows = trials(load_saved(exp_dir))
    assert len(rows) == 2 and all(row.state == "TERMINATED" and row.status == "ok" for row in rows), \
        [(row.trial_id, row.state, row.status) for row in rows]
    epochs = _epochs_by_trial(exp_dir)
    assert all(e == sorted(set(e)) and e[-1] == 3 for e in epochs.values()), epochs
    resumed = [r for rows_ in _rows_by_trial(exp_dir).values() for r in rows_ if r["resumed_from_epoch"]]
    assert resumed and resumed[0]["resumed_from_epoch"] == 1, resumed  # the held trial went on from epoch 1
    from optuna.trial import TrialState
    study = _study(load_saved(exp_dir))
    assert len(study.trials) == 2 and not any(t.state == TrialState.RUNNING for t in study.trials), \
        [t.state for t in study.trials]


@pytest.mark.timeout(90)  # a rank left waiting in a collective would hang past this
# Two one-worker trials (the search goes on after the first) and one DDP trial (~20 s to start
# its worker group here), through `tuner run` (~8 s to start): well inside the 90 s bound.
@pytest.mark.parametrize("workers, fault, samples", [(1, "oom", 2), (2, "oom_rank1", 1)])
def test_out_of_memory_records_the_config_as_infeasible_and_the_search_goes_on(ray_address, tmp_path, workers,
                                                                               fault, samples):
    spec, _, env = _fault_spec(tmp_path, f"oom-{workers}", seed=5, samples=samples, epochs=2, workers=workers,
                               width=0.5, micro_batch=32, fault=fault)
    exp = parse(spec.read_text())
    r = _cli("run", str(spec), "--address", ray_address, timeout=85, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # Every trial ran (a failure did not end the search), each ended after one report.
    assert list(map(len, _epochs_by_trial(exp.exp_dir).values())) == [1] * samples, _epochs_by_trial(exp.exp_dir)
    from tuner.results import trials
    rows = trials(exp)  # what `status` lists, reason included
    assert [(t.state, t.status) for t in rows] == [("TERMINATED", "infeasible")] * samples, rows
    # Rank 0 reports for a DDP trial: it learned of rank 1's failure through the step's agreement.
    reason = f"out of memory (inject={fault})" if workers == 1 else "1 other rank(s) ran out of memory"
    assert all(reason in t.metrics["reason"] for t in rows), [t.metrics["reason"] for t in rows]
    from optuna.trial import TrialState
    assert [t.state for t in _study(exp).trials] == [TrialState.FAIL] * samples


def test_quickstart_console_is_quiet_and_names_each_trial_event(ray_address, tmp_path):
    # The quickstart as shipped, with two steps per epoch to keep it short; piped, not a TTY.
    r = _cli("run", "search_spaces/quickstart.yaml", "--address", ray_address, "--set", f"storage_path={tmp_path}",
             "--set", "train.max_steps_per_epoch=2", "--set", f"train.cache_dir={tmp_path / 'cache'}")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (r.stdout + r.stderr).splitlines()
    assert len(lines) < 80, "\n".join(lines)
    text = "\n".join(lines)
    for chatter in ("╭", "Trial status", "INFO", "A new study created", "driver_artifacts", "Current best trial"):
        assert chatter not in text, chatter
    exp_dir = tmp_path / "quickstart"
    assert f"tensorboard --logdir {exp_dir}" in text
    ended = [ln for ln in lines if re.search(r"\] trial \w+ (stopped at rung epoch \d+ \(not promoted\)|finished 15 epochs)",
                                             ln)]   # promotion ASHA, the default
    assert len([ln for ln in lines if re.search(r"\] trial \w+ started \| lr=", ln)]) == 12
    assert len(ended) == 12 and ended[-1].startswith("[12/12 done ") and all("(best " in ln for ln in ended)
    best = next(ln for ln in lines if ln.startswith("best val_acc"))
    assert re.fullmatch(r"best val_acc = [\d.]+ at epoch \d+: lr=\S+ micro_batch_size=\d+ weight_decay=\S+ "
                        r"label_smoothing=\S+ optimizer=(sgd|adamw)", best), best


def test_an_errored_trial_is_named_with_its_error_file_in_the_console_and_status(ray_address, tmp_path):
    spec = tmp_path / "err.yaml"
    spec.write_text(f"""
name: err
storage_path: {tmp_path / 'runs'}
metric: val_acc
mode: max
budget: {{num_samples: 1, max_epochs: 2, grace_epochs: 1, reduction_factor: 3}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: cifar10, data_root: {tmp_path / 'empty'}, cache_dir: {tmp_path / 'cache'}, model: convnet}}
search:
  lr: {{type: loguniform, low: 1.0e-3, high: 0.3}}
""")
    (tmp_path / "empty").mkdir()
    r = _cli("run", str(spec), "--address", ray_address)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-3000:]
    err = [ln for ln in out.splitlines() if re.search(r"\] trial \w+ errored \| ", ln)]
    assert len(err) == 1 and "DataError: CIFAR-10 not found" in err[0], out[-3000:]
    path = Path(err[0].rsplit("error file: ", 1)[1])
    assert path.is_file() and path.parent.parent == tmp_path / "runs" / "err"   # inside the experiment folder
    s = _cli("status", str(tmp_path / "runs" / "err"))
    assert s.returncode == 0, s.stderr
    assert "error: trainables.data.sources.DataError: CIFAR-10 not found" in s.stdout and f"error file: {path}" in s.stdout


def test_each_trial_reserves_the_cpus_its_loader_uses_and_status_shows_it(ray_address, tmp_path):
    from tuner.run import run_experiment
    exp = parse(f"""
name: reserve
storage_path: {tmp_path / 'runs'}
seed: 3
budget: {{num_samples: 3, max_epochs: 1, grace_epochs: 1}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {tmp_path / 'cache'}, model: convnet, width: 0.25, loader: torch,
         max_steps_per_epoch: 1}}
search:
  num_workers: {{type: choice, values: [0, 1, 2]}}
""")
    run_experiment(exp, echo=lambda s: None)
    r = _cli("status", str(exp.exp_dir), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["trials"]
    assert len(rows) == 3 and all(t["status"] == "ok" for t in rows), rows
    for t in rows:
        assert t["reserved"] == {"CPU": 1.0 + t["params"]["num_workers"]}, t
    text = _cli("status", str(exp.exp_dir)).stdout
    assert all(f"CPU {1 + t['params']['num_workers']}" in text for t in rows), text


# A conditional search space (tests/tuner/test_conditional.py has the rest) through `run`, Ctrl-C and
# `resume`.

CONDITIONAL_RUN = """
name: condrun
storage_path: {tmp}/runs
seed: 1
budget: {{num_samples: 3, max_epochs: 2, grace_epochs: 2, max_concurrent_trials: 1}}
train: {{dataset: digits, cache_dir: {tmp}/cache, width: 0.25, flip: false, crop_padding: 1, max_steps_per_epoch: 4,
         }}
search:
  optimizer:
    type: choice
    values: [sgd, adamw]
    branches:
      sgd: {{lr: {{type: loguniform, low: 1.0e-2, high: 0.3}}}}
      adamw: {{lr: {{type: loguniform, low: 1.0e-4, high: 1.0e-2}}}}
"""


@pytest.mark.integration
@pytest.mark.timeout(500)
def test_a_conditional_study_resumes_and_status_and_export_show_the_branch(ray_address, tmp_path):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "hold").write_text("2")          # every trial waits before epoch 2
    spec = tmp_path / "cond.yaml"
    spec.write_text(CONDITIONAL_RUN.format(tmp=tmp_path))
    exp_dir = tmp_path / "runs" / "condrun"
    interrupt_when([sys.executable, "-m", "tuner", "run", str(spec), "--address", ray_address],
                   lambda: any(f.read_text().strip() for f in exp_dir.glob("*/result.json")),
                   env={**os.environ, **fault_plugin.env(dir=tmp_path / "faults")})
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
    import yaml

    from trainables.config import TrainConfig
    cfg = TrainConfig.from_dict(yaml.safe_load((tmp_path / "best" / "best_config.yaml").read_text()))
    assert cfg.optimizer == best and (1e-2 <= cfg.lr <= 0.3 if best == "sgd" else 1e-4 <= cfg.lr <= 1e-2)
