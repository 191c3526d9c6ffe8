"""Preflight: the folders a run writes are usable before anything starts, and every node of a
cluster can run trials.

The folder checks are plain Python (no Ray, no torch), so they run on the driver before Ray
is started; the node checks run as a task pinned to each node and again in each trial.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from trainables.runtime.storage import (
    first_line,
    is_uri,
    parent_and_name,
    read_bytes,
    writable_problem,
)

MIN_FREE_BYTES = 1 << 30  # 1 GiB free under each folder a run writes (checkpoints, caches)


class PreflightError(RuntimeError):
    """A folder a run needs cannot be used; one problem per line, each with its fix."""


def free_bytes(path: Path) -> int:
    """Free space of the filesystem holding `path` (its nearest existing ancestor)."""
    return shutil.disk_usage(_existing_ancestor(path)).free


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _blocker(path: Path) -> Path | None:
    """A file standing where `path` or one of its parent folders must be."""
    for p in [path, *path.parents]:
        if p.exists():
            return None if p.is_dir() else p
    return None


def folder_problem(name: str, path: str | os.PathLike, min_free: int = MIN_FREE_BYTES) -> str | None:
    """Why the folder `name` (a setting) at `path` cannot be written, or None.

    Checked by behaviour, not by permission bits (root ignores those): a marker file is
    written, read back and removed in the folder's nearest existing ancestor (for a cloud URI,
    in the URI itself)."""
    if is_uri(path):
        return writable_problem(name, str(path))
    path = Path(path).expanduser()
    blocker = _blocker(path)
    if blocker is not None:
        return f"{name}: {str(path)!r} cannot be a folder: {str(blocker)!r} is a file; move it or choose another path"
    base = _existing_ancestor(path)
    marker = base / f".tuner-preflight-{uuid.uuid4().hex}"
    try:
        marker.write_bytes(b"ok")
        ok = marker.read_bytes() == b"ok"
    except OSError as e:
        return f"{name}: {str(path)!r} is not writable ({e.strerror} in {base}); fix its permissions or choose another path"
    finally:
        try:
            marker.unlink()
        except OSError:
            pass
    if not ok:
        return f"{name}: {str(path)!r}: a file written there did not read back; check the filesystem"
    free = free_bytes(path)
    if free < min_free:
        return (f"{name}: {str(path)!r} has {free / 2**20:.0f} MiB free, below the {min_free / 2**20:.0f} MiB "
                f"a run needs; free space or choose another path")
    return None


def check_folders(folders: dict[str, str | os.PathLike], min_free: int = MIN_FREE_BYTES) -> None:
    """Raise PreflightError naming every folder (setting -> path) that cannot be used."""
    problems = [p for name, path in folders.items() if (p := folder_problem(name, path, min_free))]
    if problems:
        raise PreflightError("preflight failed, nothing was started:\n" + "\n".join(f"  - {p}" for p in problems))


# ---------------------------------------------------------------- every node of a cluster

MARKER = ".tuner-preflight"   # in the experiment folder: the run's token; every node must read it


def versions() -> dict[str, str]:
    """What must match across nodes: Python, Ray and torch, from package metadata (a trial
    checks its node before it trains: importing torch here would cost every trial's process
    the import before its own)."""
    import platform
    from importlib.metadata import version
    return {"python": platform.python_version(), "ray": version("ray"), "torch": version("torch")}


def node_problems(marker: str, token: str, expected: dict[str, str], gpus: float = 0) -> list[str]:
    """What keeps this node from running trials of the run that wrote `marker` (holding
    `token`): the storage path it cannot see (judged by reading the driver's marker and writing
    one of its own, not by the path's form), versions that differ from the driver's, or, on a
    node with GPUs, CUDA that does not work."""
    problems = (_uri_problems if is_uri(marker) else _folder_problems)(marker, token)
    mine = versions()
    for k, v in expected.items():
        if mine.get(k) != v:
            problems.append(f"{k} {mine.get(k)} here but {v} on the driver; install the same version on every node "
                            "(cluster/Dockerfile)")
    if gpus > 0:
        import torch
        try:
            ok = torch.cuda.is_available() and float((torch.ones(1, device="cuda") + 1).item()) == 2.0
        except Exception as e:  # noqa: BLE001
            ok, why = False, str(e).splitlines()[0]
        else:
            why = "torch.cuda.is_available() is False"
        if not ok:
            problems.append(f"the node has {gpus:g} GPU(s) but CUDA does not work ({why}); check the driver (>= 580)")
    return problems


def _folder_problems(marker: str, token: str) -> list[str]:
    """node_problems' storage part for a folder: the driver's marker reads back here, and the
    folder is writable."""
    path = Path(marker)
    try:
        seen = path.read_text()
    except OSError as e:
        return [(f"cannot read {path} ({e.strerror}): the storage path is not the driver's here; mount the "
                f"same shared folder at {path.parent.parent} on every node")]
    if seen != token:
        return [(f"{path} holds another run's token: this node sees a different folder at "
                f"{path.parent.parent}; mount the driver's shared folder there")]
    trouble = folder_problem("storage_path", path.parent, min_free=0)
    return [trouble] if trouble else []


def _uri_problems(marker: str, token: str) -> list[str]:
    """node_problems' storage part for a cloud URI: the driver's marker reads back here, and
    this node can write there too."""
    try:
        seen = read_bytes(marker).decode()
    except Exception as e:  # noqa: BLE001 - pyarrow's errors for a missing object, bad credentials, no route
        return [(f"cannot read {marker} ({first_line(e)}): this node cannot reach the run's storage; give every node the "
                "same credentials (instance profile / service account) and network access to it")]
    if seen != token:
        return [(f"{marker} holds another run's token: this node reads a different store; give every node the "
                "driver's storage settings")]
    trouble = folder_problem("storage_path", parent_and_name(marker)[0], min_free=0)
    return [trouble] if trouble else []


def trial_node_check() -> None:
    """In a trial, before it trains: the node it landed on (one that may have joined after the
    run started) passes the same checks; PreflightError otherwise."""
    from trainables import settings
    spec = settings.read().preflight
    if not spec:
        return
    marker, token, *rest = spec.split("\n")
    expected = dict(zip(("python", "ray", "torch"), (rest[0].split() if rest else [])))
    problems = node_problems(marker, token, expected)
    if problems:
        import socket
        raise PreflightError(f"node {socket.gethostname()} cannot run this trial:\n" + "\n".join(f"  - {p}" for p in problems))
