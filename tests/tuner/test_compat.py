"""Each compatibility hook (tuner/_compat.py, trainables/_compat.py) against the installed Ray,
Optuna and torch: an upgrade that breaks one fails here, by the hook's name.  And an experiment
folder written by version 0.1.0 (tests/fixtures/written-by-0.1.0) still loads, shows, exports,
reports and resumes."""
import functools
import glob
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainables import _compat as train_compat
from tuner import _compat

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1.0"


def hook(name):
    """Run a hook's check; any failure names the hook and the installed versions."""
    def wrap(check):
        @functools.wraps(check)
        def test(*args, **kwargs):
            try:
                check(*args, **kwargs)
            except Exception as e:   # noqa: BLE001 - re-raised with the hook's name
                import optuna
                import ray
                pytest.fail(f"compat hook {name!r} broke with ray {ray.__version__}, optuna {optuna.__version__}, "
                            f"torch {torch.__version__} (checked against {_compat.CHECKED} / "
                            f"{train_compat.CHECKED}): {type(e).__name__}: {e}")
        return test
    return wrap


def _asha(eta=3.0):
    """Ray's ASHAScheduler as 0.1.0 and 0.2.0 built it (their folders pickled it)."""
    from ray.tune.schedulers import ASHAScheduler
    return ASHAScheduler(time_attr="epoch", metric="val_loss", mode="min", max_t=15, grace_period=1,
                         reduction_factor=eta)


@hook("rank_cutoffs")
def test_rank_cutoffs():
    from dataclasses import dataclass

    @dataclass
    class T:
        trial_id: str

    def decisions(ranked):
        s = _asha()
        if ranked:
            _compat.rank_cutoffs(s)
        out = []
        for tid, loss in (("diverging", 1000.0), ("good", 0.5), ("chance", 2.3)):
            s.on_trial_add(None, T(tid))
            out.append(s.on_trial_result(None, T(tid), {"epoch": 1, "training_iteration": 1, "val_loss": loss}))
        return out
    # By rank the cutoff is 0.5, a value recorded there: the chance-level trial stops.
    assert decisions(True)[-1] == "STOP" and decisions(False)[-1] == "CONTINUE"


@hook("asha_milestones")
def test_asha_milestones():
    assert _compat.asha_milestones(_asha(2.5)) == pytest.approx([1.0, 2.5, 6.25])


@pytest.mark.integration
@hook("train_state_actor")
def test_train_state_actor(ray_address):
    import ray
    assert isinstance(ray.get(_compat.train_state_actor().get_train_runs.remote(), timeout=120), dict)


@hook("validate_cluster_config")
def test_validate_cluster_config():
    import copy

    import yaml
    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster" / "onprem.yaml").read_text())
    _compat.validate_cluster_config(copy.deepcopy(cfg))
    with pytest.raises(Exception, match="no_such_key|provider|Additional properties"):
        _compat.validate_cluster_config({"cluster_name": "x", "no_such_key": 1})


DRIVER_KV = """
import sys, ray
from ray.cluster_utils import Cluster
from tuner import _compat
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
c.remove_node(c.head_node, allow_graceful=True)      # its GCS is gone; this process's KV client pointed there
_compat.driver_kv_back()
print("answer", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=30))   # a new remote function: the KV
"""


@hook("driver_kv_back")
def test_driver_kv_back(ray_address, tmp_path):
    # In a process of its own: were the hook broken, Ray would end that process after 60 s.
    r = subprocess.run([sys.executable, "-c", DRIVER_KV, ray_address], check=False, capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert "answer 42" in r.stdout, (r.stdout + r.stderr)[-3000:]


@hook("ray_address_file")
def test_ray_address_file():
    assert _compat.ray_address_file().endswith("ray_current_cluster")


@hook("restored_searcher + restored_scheduler")
def test_restored_searcher_and_scheduler(tmp_path):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from tuner.schema import Budget
    from tuner.searcher import FidelitySearcher
    from tuner.tuning import asha
    _compat.install_old_names()
    folder = shutil.copytree(FIXTURE, tmp_path / FIXTURE.name)
    def trainable(config):   # the name the run's trainable had
        return None
    restored = tune.Tuner.restore(str(folder), trainable=trainable)
    assert isinstance(_compat.restored_searcher(restored), FidelitySearcher)
    assert isinstance(_compat.restored_scheduler(restored), ASHAScheduler)   # what 0.1.0 pickled
    ours = asha(Budget(asha="promotion"), "val_acc", "max")
    tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(scheduler=ours))
    assert _compat.restored_scheduler(tuner) is ours   # the same attribute a restored Tuner fills


@pytest.mark.integration
@hook("mark_trial_state")
def test_mark_trial_state(ray_address, tmp_path):
    """A paused trial a scheduler ends is saved TERMINATED (unmarked, Tune saves it as PAUSED)."""
    import json

    from ray import tune
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import FIFOScheduler

    class EndPaused(FIFOScheduler):
        """Pauses each trial after its first result; ends the paused ones when nothing runs."""

        def __init__(self, mark):
            super().__init__()
            self.mark = mark

        def on_trial_result(self, tune_controller, trial, result):
            return "PAUSE" if result["training_iteration"] == 1 else "CONTINUE"

        def choose_trial_to_run(self, tune_controller):
            trials = tune_controller.get_trials()
            pending = [t for t in trials if t.status == Trial.PENDING]
            if pending:
                return pending[0]
            if not any(t.status == Trial.RUNNING for t in trials):
                for t in trials:
                    if t.status == Trial.PAUSED:
                        tune_controller.stop_trial(t)
                        if self.mark:
                            _compat.mark_trial_state(tune_controller, t)
            return None

    def trainable(config):
        for i in range(3):
            tune.report({"i": i})

    def saved_states(mark):
        name = f"marked-{mark}"
        tune.Tuner(trainable, tune_config=tune.TuneConfig(scheduler=EndPaused(mark), num_samples=1),
                   run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0)).fit()
        (state,) = (tmp_path / name).glob("experiment_state-*.json")
        return [json.loads(t)["status"] for t, _ in json.loads(state.read_text())["trial_data"]]
    assert saved_states(True) == ["TERMINATED"]


@hook("install_old_names + searcher_state/console_state/tensorboard_state")
def test_pickles_written_by_0_1_0_load(tmp_path):
    from tuner.console import Console
    from tuner.searcher import FidelitySearcher
    from tuner.tensorboard import TrialTensorBoard
    _compat.install_old_names()
    saved = pickle.loads((FIXTURE / "tuner.pkl").read_bytes())
    tc, rc = saved["_tune_config"], saved["_run_config"]
    assert isinstance(tc.search_alg, FidelitySearcher) and tc.search_alg.journal
    assert {type(c) for c in rc.callbacks} == {Console, TrialTensorBoard}
    console = next(c for c in rc.callbacks if isinstance(c, Console))
    assert console.stream is sys.stdout and console.drawn == 0
    s = FidelitySearcher(max_epochs=2)
    folder = shutil.copytree(FIXTURE, tmp_path / FIXTURE.name)   # restoring opens the study's journal there
    s.restore(glob.glob(str(folder / "searcher-state-*.pkl"))[0])
    assert sorted(s.numbers.values()) == [0, 1, 2] and len(s.completed) == 3
    assert [t.state.name for t in s.study.trials] == ["COMPLETE", "PRUNED", "COMPLETE"]


@hook("pedanova_top")
def test_pedanova_top():
    assert _compat.pedanova_top([1.0, 2.0, 3.0, 4.0], 0.5, lower_is_better=True) == 2
    assert _compat.pedanova_top([1.0, 2.0, 2.0, 4.0], 0.25, lower_is_better=False) == 1
    assert _compat.pedanova_top([4.0, 4.0, 1.0, 0.0], 0.25, lower_is_better=False) == 2   # ties stay together


@hook("skip_step_if")
def test_skip_step_if():
    for bad, moved in ((1.0, False), (0.0, True)):
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.1, fused=True)
        w.grad = torch.ones(3)
        with train_compat.skip_step_if(opt, torch.tensor(bad)):
            opt.step()
        assert bool((w != 1).any()) == moved, (bad, w)
        assert getattr(opt, "found_inf", None) is None


# ---------------------------------------------------------------- the 0.1.0 folder, end to end


@pytest.fixture
def old_folder(tmp_path):
    folder = shutil.copytree(FIXTURE, tmp_path / "runs" / FIXTURE.name)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o022)   # as a run leaves it: only its owner writes
    return folder


def _cli(*args, tmp_path, timeout=300):
    env = {**os.environ, "TUNER_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=tmp_path)


def _recorded(folder: Path, *args, tmp_path, timeout=300) -> tuple[subprocess.CompletedProcess, set[Path], set[Path]]:
    """A command's result; the files and folders there before it that it opened, by any of its
    processes; and those the trust check it starts with judges (tests/tuner/test_trust.py)."""
    from opens import Opens

    from tuner.experiment import covered
    before = {folder, *folder.rglob("*")}    # what a command writes and reads back is its own
    judged = set(covered(folder))
    rec = Opens(folder)
    r = _cli(*args, tmp_path=tmp_path, timeout=timeout)
    return r, {p for p in rec.read() if p in before}, judged


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_folder_written_by_0_1_0_shows_exports_reports_and_resumes(old_folder, tmp_path, ray_address):
    """Each command also has what it reads recorded: every file it opens in the folder must be
    one the trust check judged first (issue: the check missed search_gen_state-*.json)."""
    f, opened = str(old_folder), {}
    r, opened["status"], judged = _recorded(old_folder, "status", f, tmp_path=tmp_path)
    assert r.returncode == 0 and "val_acc" in r.stdout, r.stdout + r.stderr
    r, opened["export"], judged = _recorded(old_folder, "export", f, "--out", str(tmp_path / "best"), tmp_path=tmp_path)
    assert r.returncode == 0 and (tmp_path / "best" / "best_config.yaml").is_file(), r.stdout + r.stderr
    r, opened["report"], judged = _recorded(old_folder, "report", f, tmp_path=tmp_path)
    assert r.returncode == 0 and (old_folder / "report" / "report.html").is_file(), r.stdout + r.stderr
    unjudged = {name: sorted(str(p.relative_to(old_folder)) for p in ps - judged) for name, ps in opened.items()}
    r, opened["resume"], judged = _recorded(old_folder, "resume", f, "--address", ray_address, tmp_path=tmp_path,
                                            timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "best val_acc" in r.stdout, r.stdout[-3000:]
    unjudged["resume"] = sorted(str(p.relative_to(old_folder)) for p in opened["resume"] - judged)
    assert not any(unjudged.values()), f"files read that the trust check did not judge: {unjudged}"
    # The record sees what each command reads, Tune's own reads (pyarrow, C++) included.
    names = {p.name for ps in opened.values() for p in ps}
    assert {"tuner-experiment.yaml", "tuner.pkl", "checkpoint.pt"} <= names, names
    assert any(n.startswith("search_gen_state-") for n in names), names   # a cloudpickle, despite .json
    assert any(p.name.startswith("experiment_state-") for p in opened["status"]), opened["status"]


def test_every_hook_has_a_test_by_its_name():
    import re
    root = Path(__file__).resolve().parents[2]
    hooks = set()
    for module in ("tuner/_compat.py", "trainables/_compat.py"):
        hooks |= set(re.findall(r'"""hook (\w+):', (root / module).read_text()))
    named = " ".join(re.findall(r'@hook\("([^"]+)"\)', Path(__file__).read_text()))
    assert hooks and not {h for h in hooks if not re.search(rf"\b{h}\b", named)}


@hook("result_loggers")
def test_result_loggers(tmp_path):
    """Tune's loggers copy a resumed trial's result file from storage over the driver's staging
    copy when the trial starts again (the premise); ours keep the staging copy when there is
    one, and copy when there is not (a new driver)."""
    from types import SimpleNamespace

    import pyarrow.fs
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
    staged, stored = tmp_path / "staged", tmp_path / "stored"
    staged.mkdir()
    stored.mkdir()

    class Trial:   # what the loggers read of a trial that has a checkpoint
        local_path, config, checkpoint = str(staged), {}, object()
        storage = SimpleNamespace(trial_fs_path=str(stored), storage_filesystem=pyarrow.fs.LocalFileSystem())

        def init_local_path(self):
            pass

    def start(logger, name):
        """The file's rows before the resumed trial's first new one."""
        trial = Trial()
        logger.log_trial_result(1, trial, {"epoch": 3})
        logger.log_trial_end(trial)
        return "".join((staged / name).read_text().splitlines(keepends=True)[:-1])
    for name, tune_cls in (("result.json", JsonLoggerCallback), ("progress.csv", CSVLoggerCallback)):
        (stored / name).write_text("epoch 1 (synced earlier)\n")
        (staged / name).write_text("epoch 1\nepoch 2\n")
        kept = next(c for c in _compat.result_loggers() if isinstance(c, tune_cls))
        assert start(kept, name) == "epoch 1\nepoch 2\n"
        assert start(tune_cls(), name) == "epoch 1 (synced earlier)\n"   # what Tune's own does
        (staged / name).unlink()
        assert start(kept, name) == "epoch 1 (synced earlier)\n"
