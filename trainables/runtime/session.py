"""The one seam between the training loop and Ray.

A session reports metrics (with an optional checkpoint folder), hands back the checkpoint
to resume from, and tells the worker's rank, world size and device.  PlainSession needs
no Ray; TuneSession (a trial running in-process) and TrainSession (a Ray Train worker)
import Ray lazily, so the rest of trainables/ runs where Ray is not installed.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def pick_device(want: str = "auto", local_rank: int = 0) -> torch.device:
    import torch
    if want == "cpu" or (want == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))


class Session:
    rank: int = 0
    world_size: int = 1
    device: torch.device   # set by each session; the CPU when one does not (see __getattr__)

    def __getattr__(self, name: str):
        # Only reached when the attribute is missing: a session that sets no device trains on
        # the CPU, without importing torch when this module is.
        if name == "device":
            return pick_device("cpu")
        raise AttributeError(name)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        raise NotImplementedError

    def get_checkpoint(self) -> str | None:
        """A local folder holding the checkpoint to resume from, or None."""
        return None

    def earlier_checkpoints(self) -> list:
        """The other kept checkpoints of this trial, newest first: where to go when the latest
        one is corrupt.  Each a local folder, or a Ray checkpoint on cloud storage (fetched when
        tried)."""
        return []


def local_folder(ckpt) -> str | None:
    """A Ray checkpoint as a folder to read: in place when it is on a local or mounted file
    system (every rank reads the same files, no copy), else a copy.  Ray copies every rank's
    request into one temp folder per checkpoint, and a rank could read the copy while another
    was still writing it (seen as a "corrupt" checkpoint on one rank only)."""
    if ckpt is None:
        return None
    if os.path.isdir(ckpt.path):
        return ckpt.path
    return ckpt.to_directory()


def kept_beside(path: str | Path | None) -> list[str]:
    """The checkpoint folders kept beside `path` (its trial's or Train run's), newest first.
    Tune (checkpoint_000007) and Train (checkpoint_<date>_<time>) names sort by age.  Local
    or mounted storage only: elsewhere there is nothing to list and the latest must do."""
    if not path:
        return []
    here = Path(path)
    if not here.is_dir():
        return []
    return [str(p) for p in sorted(here.parent.glob("checkpoint_*"), reverse=True) if p.is_dir() and p != here]


def kept_beside_checkpoint(ckpt) -> list:
    """The other kept checkpoints of a Ray checkpoint's trial, newest first: folders beside it
    on a local or mounted file system, or on cloud storage its siblings there, as checkpoints
    of the same kind (fetched only if tried: when the newer ones are corrupt)."""
    if ckpt is None:
        return []
    if os.path.isdir(ckpt.path):
        return kept_beside(ckpt.path)
    from pyarrow.fs import FileSelector, FileType
    here = ckpt.path.rstrip("/")
    try:
        infos = ckpt.filesystem.get_file_info(FileSelector(here.rpartition("/")[0]))
    except OSError:   # the listing failed: the latest must do, as before
        return []
    return [type(ckpt)(path=p, filesystem=ckpt.filesystem) for p in sorted(
        (i.path.rstrip("/") for i in infos if i.type == FileType.Directory and i.base_name.startswith("checkpoint_")),
        reverse=True) if p != here]


def where() -> dict[str, str]:
    """The Ray actor this process is (the trial's, or the Train worker's) and its node: every
    result carries them, so the dashboard's actor view (and its logs) can be found from `status`."""
    import ray
    ctx = ray.get_runtime_context()
    return {"actor_id": ctx.get_actor_id() or "", "node_id": ctx.get_node_id() or ""}


class PlainSession(Session):
    """No Ray: keeps every report, and copies checkpoints under `storage` (a temp folder when
    not given)."""

    def __init__(self, device: str | torch.device = "auto", resume_from: str | None = None,
                 storage: str | None = None):
        self.device = pick_device(device) if isinstance(device, str) else device
        self.resume_from = resume_from
        self.storage = Path(storage) if storage else None  # a temp folder on the first checkpoint
        self.reports: list[dict[str, Any]] = []
        self.checkpoints: list[str] = []

    def report(self, metrics, checkpoint_dir=None):
        self.reports.append(dict(metrics))
        if checkpoint_dir:
            if self.storage is None:
                self.storage = Path(tempfile.mkdtemp(prefix="tuner-session-"))
            dest = self.storage / f"checkpoint_{len(self.reports):06d}"
            shutil.copytree(checkpoint_dir, dest, dirs_exist_ok=True)
            self.checkpoints.append(str(dest))

    def get_checkpoint(self):
        """Its newest checkpoint (as Tune's session gives), else the one it was given."""
        return self.checkpoints[-1] if self.checkpoints else self.resume_from

    def earlier_checkpoints(self):
        if self.checkpoints:
            return self.checkpoints[-2::-1]
        return kept_beside(self.resume_from)


class TuneSession(Session):
    """A one-worker trial running inside the Tune trial process (no TorchTrainer); with no
    device, the trial whose ranks train in their own processes and report through it."""

    def __init__(self, device: str | None = "auto"):
        if device is not None:
            self.device = pick_device(device)

    def report(self, metrics, checkpoint_dir=None):
        from ray import tune
        ckpt = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report({**metrics, **where()}, checkpoint=ckpt)

    def get_checkpoint(self):
        from ray import tune
        ckpt = tune.get_checkpoint()
        return local_folder(ckpt)

    def earlier_checkpoints(self):
        from ray import tune
        return kept_beside_checkpoint(tune.get_checkpoint())


class TrainSession(Session):
    """A Ray Train worker: every rank reports, rank 0 attaches the checkpoint."""

    def __init__(self, device: str = "auto"):
        import ray.train
        ctx = ray.train.get_context()
        self.rank, self.world_size = ctx.get_world_rank(), ctx.get_world_size()
        self.device = pick_device(device, ctx.get_local_rank())

    def report(self, metrics, checkpoint_dir=None):
        import ray.train
        ckpt = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report({**metrics, **where()}, checkpoint=ckpt)

    def get_checkpoint(self):
        import ray.train
        ckpt = ray.train.get_checkpoint()
        return local_folder(ckpt)

    def earlier_checkpoints(self):
        import ray.train
        return kept_beside_checkpoint(ray.train.get_checkpoint())


class RankSession(Session):
    """A DDP rank the trial started on its own node (trainables/runtime/ranks.py): rank 0 hands each
    report to the trial and waits until the trial has passed it (and its checkpoint) to Tune;
    the other ranks' reports go nowhere, as Ray Train forwards only rank 0's."""

    def __init__(self, rank: int, world_size: int, device: str, conn, resume_from: str | None = None,
                 earlier: list[str] | None = None):
        self.rank, self.world_size = rank, world_size
        self.device = pick_device(device, rank)
        self.conn = conn
        self.resume_from = resume_from
        self.earlier = list(earlier or [])

    def report(self, metrics, checkpoint_dir=None):
        if self.rank == 0:
            self.conn.send(("report", dict(metrics), checkpoint_dir))
            self.conn.recv()

    def get_checkpoint(self):
        return self.resume_from

    def earlier_checkpoints(self):
        return self.earlier
