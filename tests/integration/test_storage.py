"""Cloud storage: `storage_path: s3://...` against a real S3-compatible server (moto's server
mode, started here in its own process group).  Ray writes the trials there, the tuner its own
files (experiment YAML, summary, searcher journal, preflight marker); `resume`, `status`,
`report` and `export` read the experiment from the bucket with an empty local cache.

Each `tuner` command here starts an embedded Ray of its own (no --address), apart from the
suite's shared one: isolation that once stood in for a fix (the suite's driver lost its GCS
calls after the multi-node module; docs/internals.md has the cause, now mended)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fault_plugin
import pytest
from conftest import S3_TEST_ENV, make_bucket, s3_uri
from ray_helpers import interrupt_when

pytest.importorskip("moto", reason="moto[server] (the test extra) runs the S3-compatible server")

from trainables.runtime import storage

BUCKET = "tuner-results"


def _uri(endpoint: str, path: str) -> str:
    return s3_uri(endpoint, BUCKET, path)


def _make_bucket(endpoint: str) -> None:
    make_bucket(endpoint, BUCKET)


def _objects(endpoint: str, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector, FileType, S3FileSystem
    fs = S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1")
    root = f"{BUCKET}/{prefix}"
    return sorted(i.path[len(root) + 1:] for i in fs.get_file_info(FileSelector(root, recursive=True,
                                                                                   allow_not_found=True))
                  if i.type == FileType.File)


def _own_ray_env(**extra: str) -> dict[str, str]:
    """The environment of a `tuner` command that starts its own Ray: no RAY_ADDRESS, moto's keys."""
    return {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **S3_TEST_ENV, **extra}


def _cli(args: list[str], cwd: Path, cache: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = _own_ray_env(TUNER_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def test_storage_join_keeps_the_query_last_and_local_paths_plain(tmp_path):
    uri = "s3://b/runs?endpoint_override=h:1&scheme=http"
    assert storage.join(uri, "exp", "f.yaml") == "s3://b/runs/exp/f.yaml?endpoint_override=h:1&scheme=http"
    assert storage.parent_and_name(storage.join(uri, "exp")) == (uri, "exp")
    assert storage.join(str(tmp_path), "exp") == str(tmp_path / "exp")
    assert storage.local_copy(storage.join(uri, "exp")).parts[-4:] == ("s3", "b", "runs", "exp")


def test_an_unreachable_bucket_is_refused_before_anything_starts(s3_endpoint, tmp_path):
    spec = tmp_path / "nobucket.yaml"
    spec.write_text(f"name: nob\nstorage_path: \"{_uri(s3_endpoint, 'runs').replace(BUCKET, 'no-such-bucket')}\"\n"
                    f"train: {{dataset: digits, cache_dir: {tmp_path / 'cache'}}}\n")
    r = _cli(["run", str(spec), "--address", "127.0.0.1:1"], tmp_path, tmp_path / "tc", timeout=120)
    assert r.returncode != 0 and "storage_path" in r.stderr and "no-such-bucket" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "preflight failed" in r.stderr, r.stderr


@pytest.mark.integration
@pytest.mark.timeout(500)
def test_an_s3_experiment_runs_resumes_and_is_read_back_from_the_bucket(s3_endpoint, tmp_path):
    """Over 60 s (about 55-60 s on 2 cores): `run` and `resume` each start an embedded Ray of their
    own (about 8 s each), around a Ctrl-C, and four more commands each read the bucket."""
    _make_bucket(s3_endpoint)
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "hold").write_text("2")          # every trial waits before epoch 2
    location = _uri(s3_endpoint, "runs/s3exp")
    spec = tmp_path / "s3exp.yaml"
    spec.write_text(f"""
name: s3exp
storage_path: "{_uri(s3_endpoint, 'runs')}"
seed: 1
budget: {{num_samples: 2, max_epochs: 2, grace_epochs: 2, max_concurrent_trials: 1}}
train: {{dataset: digits, cache_dir: {tmp_path / 'cache'}, width: 0.25, flip: false, crop_padding: 1,
         max_steps_per_epoch: 4}}
search:
  lr: {{type: loguniform, low: 1.0e-2, high: 0.1}}
""")
    env = _own_ray_env(TUNER_CACHE=str(tmp_path / "driver-cache"), **fault_plugin.env(dir=faults))
    # The first trial's epoch-1 checkpoint reaches the bucket, then Ctrl-C.
    out = interrupt_when([sys.executable, "-m", "tuner", "run", str(spec)],
                         lambda: any(o.endswith("checkpoint.pt") for o in _objects(s3_endpoint, "runs/s3exp")),
                         cwd=tmp_path, env=env)
    assert f"results in {location}" in out, out[-3000:]
    assert not (tmp_path / "runs").exists()          # nothing relative to the current folder
    held = _objects(s3_endpoint, "runs/s3exp")
    for name in ("tuner-experiment.yaml", "optuna-journal.log"):
        assert name in held, held
    assert any(o.startswith("experiment_state-") for o in held), held

    (faults / "hold").unlink()
    # Every later command starts from an empty local cache: what it needs comes from the bucket.
    r = _cli(["resume", location], tmp_path, tmp_path / "cache-resume", timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"resuming {location}" in r.stdout and "2 trials" in r.stdout, r.stdout

    s = _cli(["status", location, "--json"], tmp_path, tmp_path / "cache-status")
    assert s.returncode == 0, s.stderr
    rows = json.loads(s.stdout)["trials"]
    assert len(rows) == 2 and all(t["state"] == "TERMINATED" and t["epoch"] == 2 for t in rows), rows

    held = _objects(s3_endpoint, "runs/s3exp")
    assert "summary.json" in held, held
    for t in rows:      # the interrupted trial went on from its checkpoint: no epoch reported twice
        lines = storage.read_bytes(storage.join(location, f"trial_{t['trial_id']}", "result.json")).decode()
        epochs = [json.loads(x)["epoch"] for x in lines.splitlines() if x.strip()]
        assert epochs == [1, 2], (t["trial_id"], epochs)

    import optuna

    from tuner.searcher import JOURNAL, journal_storage
    journal = tmp_path / "journal.log"
    journal.write_bytes(storage.read_bytes(storage.join(location, JOURNAL)))
    study = optuna.load_study(study_name="s3exp", storage=journal_storage(journal))
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.COMPLETE) == 2, study.trials

    rep = _cli(["report", location], tmp_path, tmp_path / "cache-report")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    html = Path(rep.stdout.split("report: ", 1)[1].splitlines()[0])
    assert html.is_file() and html.is_relative_to(tmp_path / "cache-report"), rep.stdout

    e = _cli(["export", location, "--out", str(tmp_path / "best")], tmp_path, tmp_path / "cache-export")
    assert e.returncode == 0, e.stdout + e.stderr
    metrics = json.loads((tmp_path / "best" / "metrics.json").read_text())
    assert metrics["trial_id"] in {t["trial_id"] for t in rows} and 0 <= metrics["val_acc"] <= 1
    assert (tmp_path / "best" / "checkpoint.pt").stat().st_size > 0


def test_status_of_a_uri_with_no_experiment_says_so(s3_endpoint, tmp_path):
    _make_bucket(s3_endpoint)
    r = _cli(["status", _uri(s3_endpoint, "runs/never")], tmp_path, tmp_path / "tc", timeout=120)
    assert r.returncode == 2 and "not an experiment" in r.stderr and "tuner-experiment.yaml" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_ddp_trial_checkpoints_to_the_bucket_and_exports_from_it(s3_endpoint, tmp_path):
    _make_bucket(s3_endpoint)
    location = _uri(s3_endpoint, "runs/s3ddp")
    spec = tmp_path / "s3ddp.yaml"
    spec.write_text(f"""
name: s3ddp
storage_path: "{_uri(s3_endpoint, 'runs')}"
budget: {{num_samples: 1, max_epochs: 2, grace_epochs: 2}}
resources: {{workers: 2, cpus_per_worker: 1, ddp: train}}
train: {{dataset: digits, cache_dir: {tmp_path / 'cache'}, width: 0.25, flip: false, crop_padding: 1,
         max_steps_per_epoch: 2, lr: 0.05}}
""")
    r = _cli(["run", str(spec)], tmp_path, tmp_path / "driver-cache")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    held = _objects(s3_endpoint, "runs/s3ddp")
    assert any(o.startswith("train-runs/") and o.endswith("checkpoint.pt") for o in held), held
    e = _cli(["export", location, "--out", str(tmp_path / "best")], tmp_path, tmp_path / "cache-export")
    assert e.returncode == 0, e.stdout + e.stderr
    assert (tmp_path / "best" / "checkpoint.pt").stat().st_size > 0


def _put(endpoint: str, key: str, body: bytes) -> None:
    """An object under any key, '..' included (S3 takes any string; pyarrow lists it as it is)."""
    import boto3
    boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                 aws_access_key_id=S3_TEST_ENV["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=S3_TEST_ENV["AWS_SECRET_ACCESS_KEY"]).put_object(Bucket=BUCKET, Key=key, Body=body)


@pytest.mark.parametrize("key", ["../../outside/planted.txt", "a/../../../outside/planted.txt", "a//planted.txt"])
def test_an_object_key_that_would_leave_the_local_copy_is_refused(s3_endpoint, tmp_path, key):
    _make_bucket(s3_endpoint)
    name = f"escape-{abs(hash(key)) % 10_000}"
    _put(s3_endpoint, f"runs/{name}/tuner-experiment.yaml", f"name: {name}\n".encode())
    _put(s3_endpoint, f"runs/{name}/{key}", b"planted")
    cache = tmp_path / "tc"
    r = _cli(["status", _uri(s3_endpoint, f"runs/{name}")], tmp_path, cache, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "refused to copy" in r.stderr and "outside that folder" in r.stderr and key in r.stderr, r.stderr
    assert not [p for p in tmp_path.rglob("planted.txt")], "a file landed outside the local copy"


def test_a_checkpoint_path_that_would_leave_the_local_copy_is_refused(s3_endpoint, tmp_path, monkeypatch):
    from tuner.config import parse
    from tuner.experiment import local_checkpoint
    from tuner.schema import ExperimentError
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "tc"))
    for k, v in S3_TEST_ENV.items():
        monkeypatch.setenv(k, v)
    exp = parse(f"name: ck\nstorage_path: \"{_uri(s3_endpoint, 'runs')}\"\n")
    with pytest.raises(ExperimentError, match="refused to copy .* outside that folder"):
        local_checkpoint(exp, f"{BUCKET}/runs/ck/../../outside/checkpoint_000001")
    assert not (tmp_path / "tc" / "storage" / "s3" / BUCKET / "outside").exists()


def test_a_link_planted_in_the_local_copy_is_not_followed(tmp_path):
    src, dest, elsewhere = tmp_path / "src", tmp_path / "dest", tmp_path / "elsewhere"
    (src / "trial_1").mkdir(parents=True)
    (src / "trial_1" / "result.json").write_text("{}")
    (src / "top.json").write_text("{}")
    dest.mkdir()
    elsewhere.mkdir()
    (dest / "trial_1").symlink_to(elsewhere)
    with pytest.raises(storage.UnsafeKey, match="symbolic link"):
        storage.download(f"file://{src}", dest)
    assert not list(elsewhere.iterdir())
    (dest / "trial_1").unlink()
    assert sorted(storage.download(f"file://{src}", dest)) == ["top.json", "trial_1/result.json"]


def test_a_corrupt_latest_checkpoint_on_the_bucket_falls_back_to_the_previous_one(s3_endpoint, tmp_path, monkeypatch):
    """The fallback a trial takes when Tune hands it a checkpoint on cloud storage: the kept
    checkpoints beside it on the bucket, fetched only when the newer ones are corrupt."""
    from conftest import digits_config
    from ray.train import Checkpoint

    from trainables.loop import train_loop
    from trainables.runtime import checkpoint as ck
    from trainables.runtime.session import PlainSession, kept_beside_checkpoint, local_folder
    for k, v in S3_TEST_ENV.items():
        monkeypatch.setenv(k, v)
    _make_bucket(s3_endpoint)
    cfg = digits_config(str(tmp_path / "cache"), epochs=3, max_steps_per_epoch=2)
    first = PlainSession("cpu", storage=str(tmp_path / "trial"))
    train_loop(cfg, first)
    trial = _uri(s3_endpoint, "runs/fallback/trial_1")
    for folder in first.checkpoints:     # as Tune keeps them on the bucket: checkpoint_00000N/
        for f in Path(folder).iterdir():
            storage.write_bytes(storage.join(trial, Path(folder).name, f.name), f.read_bytes())
    latest = storage.join(trial, Path(first.checkpoints[2]).name, ck.FILENAME)
    data = bytearray(storage.read_bytes(latest))
    data[len(data) // 2] ^= 0x01           # the latest (epoch 3) is corrupt on the bucket
    storage.write_bytes(latest, bytes(data))
    fs, path = storage.filesystem(storage.join(trial, Path(first.checkpoints[2]).name))
    given = Checkpoint(path=path, filesystem=fs)     # what tune.get_checkpoint() hands the trial

    class BucketSession(PlainSession):
        def get_checkpoint(self):
            return local_folder(given) if not self.checkpoints else super().get_checkpoint()

        def earlier_checkpoints(self):
            return kept_beside_checkpoint(given)

    assert [Path(c.path).name for c in kept_beside_checkpoint(given)] == [Path(p).name for p in first.checkpoints[1::-1]]
    resumed = BucketSession("cpu", storage=str(tmp_path / "again"))
    train_loop(cfg.replace(epochs=4), resumed)
    assert [r["epoch"] for r in resumed.reports] == [3, 4]
    assert resumed.reports[0]["resumed_from_epoch"] == 2
    assert resumed.reports[0]["restored_weights_sha256"] == ck.load(first.checkpoints[1])["weights_sha256"]


@pytest.mark.parametrize("where", ["folder", "bucket"])
def test_the_service_resumes_an_experiment_where_tune_saved_it_and_reads_its_summary(s3_endpoint, tmp_path,
                                                                                     monkeypatch, where):
    """What the dispatcher starts for an experiment on a folder or a bucket: `run FILE` before
    anything ran, `resume LOCATION` once Tune's state is there (a bucket's too), and `run` again
    (its saved file removed) when a driver died before Tune wrote its state; the summary's
    trials and best are read back from either."""
    from tuner.dispatcher import driver_args, summary_outcome
    for k, v in S3_TEST_ENV.items():
        monkeypatch.setenv(k, v)
    _make_bucket(s3_endpoint)
    loc = str(tmp_path / "exp") if where == "folder" else _uri(s3_endpoint, f"svc/{tmp_path.name}/exp")
    assert driver_args(loc, "/reg/e.yaml", resume=False) == ["run", "/reg/e.yaml"]
    assert summary_outcome(loc) is None
    storage.write_bytes(storage.join(loc, "tuner-experiment.yaml"), b"name: exp\n")
    assert driver_args(loc, "/reg/e.yaml", resume=True) == ["run", "/reg/e.yaml"]
    assert not storage.exists(storage.join(loc, "tuner-experiment.yaml"))
    storage.write_bytes(storage.join(loc, "tuner-experiment.yaml"), b"name: exp\n")
    storage.write_bytes(storage.join(loc, "experiment_state-2026-12-06_02-00-00.json"), b"{}")
    assert driver_args(loc, "/reg/e.yaml", resume=True) == ["resume", loc]
    storage.write_bytes(storage.join(loc, "summary.json"), json.dumps({"trials": 7, "best": {"value": 0.93}}).encode())
    assert summary_outcome(loc) == {"trials_done": 7, "best": 0.93}


def test_the_service_registry_on_a_bucket(s3_endpoint, tmp_path, monkeypatch):
    """The registry kept on a bucket (`storage: s3://...` in service.yaml): settings and records
    come back, ids are distinct, the submitted file is copied out for the driver, and a corrupt
    or other-version record is refused with one line, the rest still listed."""
    from tuner.registry import Record, Registry, RegistryError, ServiceSettings
    from tuner.service import _storage_problem
    for k, v in S3_TEST_ENV.items():
        monkeypatch.setenv(k, v)
    _make_bucket(s3_endpoint)
    root = _uri(s3_endpoint, f"service-{tmp_path.name}")
    assert _storage_problem(root) is None
    assert "cannot be written" in _storage_problem(root.replace(BUCKET, "no-such-bucket"))
    reg = Registry(root)
    assert reg.all() == ([], [])
    svc = ServiceSettings(storage=root, max_running=3)
    reg.save_settings(svc)
    assert Registry(root).saved_settings() == svc
    recs = []
    for name in ("a", "b", "c"):
        exp_id = reg.new_id(name)
        file = reg.save_file(exp_id, f"name: {name}\n")
        rec = Record(id=exp_id, name=name, owner="me", submitted=time.time(), file=file, location=f"/runs/{name}",
                     need={"CPU": 1.0}, max_slots=2)
        reg.save(rec)
        recs.append(rec)
    assert len({r.id for r in recs}) == 3 and all(r.file.startswith("s3://") for r in recs)
    assert Registry(root).get(recs[0].id) == recs[0]
    local = Path(reg.local_file(recs[0], tmp_path / "files"))
    assert local.read_text() == "name: a\n" and local.stat().st_mode & 0o077 == 0
    assert [r.id for r in reg.all()[0]] == [r.id for r in recs]    # read once, then only what changed
    storage.write_bytes(reg.path(recs[1].id), b"{not json")
    storage.write_bytes(reg.path(recs[2].id), json.dumps({**recs[2].model_dump(), "format": 2}).encode())
    for r in (reg, Registry(root)):   # the one that read them before sees the change too
        got, bad = r.all()
        assert [r.id for r in got] == [recs[0].id] and len(bad) == 2, bad
    assert "corrupt experiment record" in bad[0] + bad[1] and "format 2" in bad[0] + bad[1]
    with pytest.raises(RegistryError, match="no experiment 'nope'"):
        reg.get("nope")
