"""Relative paths of an experiment: the current folder from a shell; a persistent folder
inside a Ray job (never Ray's temporary copy of the working directory)."""
import yaml

from trainables.settings import RAY_JOB as JOB_ENV
from tuner.config import parse
from tuner.paths import settle

SPEC = "name: p\nstorage_path: ./runs\ntrain: {dataset: digits, cache_dir: .cache/tuner, data_root: ./data}\n"


def test_relative_paths_resolve_against_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(JOB_ENV, raising=False)
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    exp = settle(parse(SPEC))
    assert exp.storage_path == str(tmp_path / "runs") and exp.exp_dir == tmp_path / "runs" / "p"
    assert exp.train.cache_dir == str(tmp_path / ".cache" / "tuner") and exp.train.data_root == str(tmp_path / "data")
    # What run saves (only what the user set, now absolute) reads back the same.
    saved = exp.model_dump(mode="json", exclude_unset=True)
    assert saved["storage_path"] == str(tmp_path / "runs") and saved["train"]["cache_dir"] == str(tmp_path / ".cache/tuner")
    assert parse(yaml.safe_dump(saved)).train.data_root == str(tmp_path / "data")


def test_inside_a_ray_job_they_resolve_under_tuner_home_not_rays_copy(tmp_path, monkeypatch):
    copy = tmp_path / "ray" / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_abc"
    copy.mkdir(parents=True)
    monkeypatch.chdir(copy)
    monkeypatch.setenv(JOB_ENV, '{"runtime_env": {"working_dir": "gcs://_ray_pkg_abc.zip"}}')
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TUNER_HOME", raising=False)
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    exp = settle(parse(SPEC))
    home = tmp_path / "home" / "tuner"
    assert exp.exp_dir == home / "runs" / "p"
    assert exp.train.cache_dir == str(home / ".cache" / "tuner") and exp.train.data_root == str(home / "data")
    monkeypatch.setenv("TUNER_STORAGE", str(tmp_path / "shared" / "runs"))
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "elsewhere"))
    exp = settle(parse(SPEC))
    assert exp.exp_dir == tmp_path / "shared" / "runs" / "p" and exp.train.data_root == str(tmp_path / "elsewhere" / "data")
    assert not any(str(copy) in v for v in (exp.storage_path, exp.train.cache_dir, exp.train.data_root))


def test_absolute_paths_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv(JOB_ENV, "{}")
    monkeypatch.setenv("TUNER_STORAGE", "/elsewhere")
    exp = settle(parse(SPEC.replace("./runs", str(tmp_path / "r")).replace(".cache/tuner", "/c")))
    assert exp.storage_path == str(tmp_path / "r") and exp.train.cache_dir == "/c"


def test_a_cloud_uri_is_kept_from_the_file_or_from_tuner_storage(tmp_path, monkeypatch):
    monkeypatch.setenv(JOB_ENV, "{}")
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNER_STORAGE", "gs://bucket/runs")
    exp = settle(parse(SPEC))   # a relative storage_path inside a job: TUNER_STORAGE, a URI, as it is
    assert exp.storage_path == "gs://bucket/runs" and exp.remote and exp.location == "gs://bucket/runs/p"
    assert exp.exp_dir == tmp_path / "cache" / "storage" / "gs" / "bucket" / "runs" / "p"   # the local copy
    uri = "s3://b/r?endpoint_override=h:9&scheme=http"
    exp = settle(parse(SPEC.replace("./runs", f'"{uri}"')))
    assert exp.storage_path == uri and exp.location == "s3://b/r/p?endpoint_override=h:9&scheme=http"
