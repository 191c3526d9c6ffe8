"""Preflight: the folders a run writes are usable before anything starts.

Plain Python (no Ray, no torch), so the same function runs on the driver before Ray is
started and, later, as a task on every node of a cluster.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

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
    written, read back and removed in the folder's nearest existing ancestor."""
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
