"""Where an experiment's relative paths point: storage_path, train.cache_dir, train.data_root,
warm_start.

Run from a shell, a relative path is relative to the current folder, as the user expects.
Inside a Ray job (`ray job submit --working-dir .`) the current folder is Ray's unpacked copy
of the working directory, deleted with the Ray session: results written there are lost and
the printed `status`/`export` commands would point nowhere.  There relative paths resolve
under TUNER_HOME (default ~/tuner on the node running the driver).  TUNER_STORAGE, when set,
replaces a relative storage_path anywhere (a shared folder every node mounts, or a cloud URI
such as s3://bucket/runs).  A URI storage_path is left as it is.
"""
from __future__ import annotations

from pathlib import Path

from trainables import settings
from trainables.runtime.storage import is_uri

from .schema import Experiment


def base() -> Path:
    """What relative paths are relative to."""
    conf = settings.read()
    return conf.home if conf.in_ray_job else Path.cwd()


def _absolute(path: str, root: Path) -> str:
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else (root / p).resolve())


def settle(exp: Experiment) -> Experiment:
    """The experiment with absolute storage_path, train.cache_dir and train.data_root (a trial
    runs in its own folder, possibly on another node: a relative path would mean something else
    there)."""
    root = base()
    storage = exp.storage_path
    if not is_uri(storage) and not Path(storage).expanduser().is_absolute():
        storage = settings.read().storage or storage
    if not is_uri(storage):  # a cloud URI (s3://, gs://) is the same place from everywhere
        storage = _absolute(storage, root)
    train = exp.train.model_copy(update={"cache_dir": _absolute(exp.train.cache_dir, root),
                                         "data_root": _absolute(exp.train.data_root, root)})
    warm = exp.warm_start
    if warm and not is_uri(warm):
        warm = _absolute(warm, root)
    return exp.model_copy(update={"storage_path": storage, "train": train, "warm_start": warm})
