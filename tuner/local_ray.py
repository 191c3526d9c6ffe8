"""The embedded local Ray of a run, remembered in its experiment folder.

A `tuner run` killed with SIGKILL cannot shut down the Ray it started, and some of that
Ray's processes (its dashboard and runtime-env agents) outlive it, ignoring SIGTERM.  So
the run writes its Ray's session folder and process ids, each with its start time, into the
experiment folder; the next `run` or `resume` on the same storage path ends the leftovers
of a run whose driver is gone.  A process counts as a leftover only while its id *and* start
time match the record, so another Ray (or a process that reused an id) is never touched.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import psutil

RECORD = "local-ray.json"


def _identity(p: psutil.Process) -> list:
    return [p.pid, p.create_time(), p.name()]


def record(exp_dir: Path, session_dir: str) -> Path:
    """Write the driver and every process it started (Ray's GCS, raylet, dashboard, agents)."""
    me = psutil.Process()
    procs = []
    for child in me.children(recursive=True):
        try:
            procs.append(_identity(child))
        except psutil.Error:  # ended meanwhile
            continue
    path = Path(exp_dir) / RECORD
    tmp = path.with_name(f".{RECORD}.{os.getpid()}")
    tmp.write_text(json.dumps({"session_dir": session_dir, "driver": _identity(me), "processes": procs}, indent=1))
    os.replace(tmp, path)
    return path


def forget(exp_dir: Path) -> None:
    """The run ended normally: its Ray is shut down with it, nothing to end later."""
    (Path(exp_dir) / RECORD).unlink(missing_ok=True)


def _alive(ident: list) -> psutil.Process | None:
    """The process of a record entry, if it still runs (same id, same start time)."""
    try:
        p = psutil.Process(int(ident[0]))
        if (abs(p.create_time() - float(ident[1])) < 0.01 and p.name() == ident[2]
                and p.uids().real == os.getuid() and p.status() != psutil.STATUS_ZOMBIE):
            return p
    except (psutil.Error, ValueError, TypeError, IndexError):
        pass
    return None


def end_leftovers(storage_path: Path, echo: Callable[[str], None] = print, grace_s: float = 3.0) -> list[int]:
    """End the recorded processes of every dead run under `storage_path`; the ids ended.

    A record whose driver still runs belongs to a live run and is left alone."""
    ended: list[int] = []
    for path in sorted(Path(storage_path).glob(f"*/{RECORD}")):
        try:
            st = path.stat()
            if st.st_uid != os.getuid() or st.st_mode & 0o002:
                continue  # a record someone else could have written names no process of ours
            rec = json.loads(path.read_text())
            driver, entries = rec["driver"], list(rec["processes"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours to interpret; never guess at process ids
        if _alive(driver) is not None:
            continue
        procs = [p for p in (_alive(e) for e in entries) if p is not None]
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, still = psutil.wait_procs(procs, timeout=grace_s)
        for p in still:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(still, timeout=grace_s)
        if procs:
            ids = [p.pid for p in procs]
            echo(f"ended {len(ids)} leftover process(es) of the local Ray of a run that was killed "
                 f"({rec.get('session_dir', '?')}): {ids}")
            ended += ids
        path.unlink(missing_ok=True)
    return ended
