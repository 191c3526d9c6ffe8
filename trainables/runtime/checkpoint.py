"""Structured checkpoints: written atomically, read only with weights_only=True.

Each file has a checksum manifest beside it, checked on every read, so a flipped byte or a
truncated copy is refused rather than loaded.  The file holds plain values and tensors only (RNG states as tensors, the config as a
dict), so `torch.load(weights_only=True)` reads it and a pickle payload never runs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

FORMAT = "tuner-checkpoint-v1"
FILENAME = "checkpoint.pt"
MANIFEST_SUFFIX = ".sha256.json"  # beside each checkpoint: its size and SHA-256


class CheckpointError(RuntimeError):
    """A file that is not a readable tuner checkpoint."""


@functools.lru_cache(maxsize=1)  # one lookup per process, not one subprocess per checkpoint
def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    try:
        from importlib.metadata import version
        return version("tuner")
    except Exception:  # noqa: BLE001 - a source tree that is not installed (e.g. the GPU machine)
        return "0+source"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(),
             "python": torch.tensor(random.getstate()[1], dtype=torch.int64)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    py = tuple(int(v) for v in state["python"].tolist())
    random.setstate((3, py, None))
    if "cuda" in state and torch.cuda.is_available():
        cuda = [s.cpu() for s in state["cuda"]][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all(cuda)


def strip_prefix(state_dict: dict[str, torch.Tensor], prefix: str = "module.") -> dict[str, torch.Tensor]:
    """DDP and torch.compile wrap the model; their keys carry a prefix the bare model lacks."""
    return {(k.removeprefix(prefix)): v for k, v in state_dict.items()}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """A digest of a model's weights (names, dtypes, shapes and bytes), the same on any device."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _write_atomic(path: Path, write) -> None:
    """write(f) into a temp file in the same folder, fsync, rename over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + MANIFEST_SUFFIX)


def save(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write atomically (temp file, fsync, rename, fsync the folder), then its checksum
    manifest the same way.  A failed write leaves the previous file and manifest as they were."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "version": package_version(), "git": git_revision(), **payload}
    _write_atomic(path, lambda f: torch.save(payload, f))
    manifest = {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path)}
    _write_atomic(manifest_path(path), lambda f: f.write(json.dumps(manifest).encode()))
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy a verified checkpoint file and its manifest."""
    src, dest = Path(src), Path(dest)
    verify(src)
    shutil.copyfile(src, dest)
    manifest = json.loads(manifest_path(src).read_text())
    manifest["file"] = dest.name
    manifest_path(dest).write_text(json.dumps(manifest))
    return dest


def verify(path: Path) -> None:
    """The file matches the manifest written with it: size and SHA-256."""
    mpath = manifest_path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        manifest = json.loads(mpath.read_text())
        want_size, want_sha = int(manifest["bytes"]), str(manifest["sha256"])
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no checksum manifest ({mpath.name}): the write did not finish, "
                              "or the file was not written by tuner") from None
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"{mpath} is not a readable checksum manifest") from None
    size = path.stat().st_size
    if size != want_size:
        raise CheckpointError(f"{path} is corrupt: {size} bytes, the manifest says {want_size} (truncated?)")
    if sha256_of(path) != want_sha:
        raise CheckpointError(f"{path} is corrupt: its SHA-256 differs from the manifest written with it")


def load(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint on any device, after checking it against its manifest; a corrupt,
    truncated or foreign file gives CheckpointError."""
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    verify(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle with forbidden globals, not a torch file
        raise CheckpointError(f"{path} is not a readable tuner checkpoint (corrupted or not made by tuner): "
                              f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tuner checkpoint (no '{FORMAT}' marker)")
    payload["model"] = strip_prefix(payload["model"])
    return payload


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A bare state dict or a tuner checkpoint's model weights, on CPU."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever torch.load raises: one clear error
        raise CheckpointError(f"{path}: cannot read weights ({type(e).__name__}: {e})") from None
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path} is not a state dict of tensors")
    return strip_prefix(obj)
