"""`tuner run --warm-start` end to end on the session's Ray."""
import os
import subprocess
import sys

import optuna
import pytest

from tuner.searcher import JOURNAL, journal_storage

pytestmark = pytest.mark.integration

SPEC = """
name: {name}
storage_path: {storage}
metric: {metric}
mode: {mode}
seed: {seed}
budget: {{num_samples: 4, max_epochs: 2, grace_epochs: 1, reduction_factor: 3, max_concurrent_trials: 2}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1}}
search:
  lr: {{type: loguniform, low: 1.0e-3, high: 0.5}}
"""


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def _spec(tmp_path, name, seed=0, metric="val_acc", mode="max"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, storage=tmp_path / "runs", cache=tmp_path / "cache", seed=seed,
                                metric=metric, mode=mode))
    return path


@pytest.mark.timeout(400)
def test_a_run_warm_started_from_an_earlier_one_holds_its_trials_in_the_study(ray_address, tmp_path):
    first = _cli("run", str(_spec(tmp_path, "first")), "--address", ray_address)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    earlier = tmp_path / "runs" / "first"

    # Another metric: one error naming it, exit 2, nothing written for the new experiment.
    bad = _cli("run", str(_spec(tmp_path, "other", metric="val_loss", mode="min")), "--address", ray_address,
               "--warm-start", str(earlier))
    assert bad.returncode == 2 and "same metric and mode" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "runs" / "other").exists()

    second = _cli("run", str(_spec(tmp_path, "second", seed=1)), "--address", ray_address, "--warm-start", str(earlier))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"warm start: 4 trials from {earlier}" in second.stdout, second.stdout[-3000:]
    study = optuna.load_study(study_name="second", storage=journal_storage(tmp_path / "runs" / "second" / JOURNAL))
    warm = [t for t in study.trials if "warm_start" in t.user_attrs]
    new = [t for t in study.trials if "warm_start" not in t.user_attrs]
    assert len(warm) == 4 and len(new) == 4, study.trials
    assert [t.number for t in warm] == [0, 1, 2, 3]   # told before the first proposal
    old = optuna.load_study(study_name="first", storage=journal_storage(earlier / JOURNAL))
    assert sorted(t.params["lr"] for t in warm) == sorted(t.params["lr"] for t in old.trials)
    assert not (earlier / f"{JOURNAL}.lock").exists()
