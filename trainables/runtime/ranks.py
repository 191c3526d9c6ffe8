"""DDP ranks as processes of the trial itself, when all of a trial's ranks fit on its node.

Ray Train starts a controller, its helper actors and one actor per rank for every trial
(about 14 s on two cores before the first step).  Here the trial, which reserved every rank's
resources in one bundle, starts `world` Python processes that join one process group through a
file store and run the same train_loop with a RankSession.  Rank 0 hands each report (with its
checkpoint folder) to the trial over a socket pair; the trial reports it to Tune and answers
once Tune has persisted it, so the folder outlives the copy.  A rank that fails or dies ends
the whole group, which starts again from the latest checkpoint up to `restarts` times (what
Ray Train's FailureConfig does for its worker group); then the trial fails with the rank's
error and Tune's own retries take over.  The ranks die with the trial's process (Linux's
parent-death signal), so a trial Tune ends or kills leaves none behind.

The ranks are plain `python -m trainables.runtime.ranks` processes, not multiprocessing's
spawn: that would re-import the Ray worker's main module (and Ray) in every rank.  `tuner
train` of a DDP config starts its ranks the same way, without Ray.
"""
from __future__ import annotations

import ctypes
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, cast

# Seconds a rank gets to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1


class RankError(RuntimeError):
    """A rank failed (or died) more often than the group may restart."""


def rank_threads(cpus_per_worker: float) -> int:
    """Intra-op threads of one rank: its share of the trial's CPUs (Ray gives an actor
    OMP_NUM_THREADS = its CPUs; the ranks share the trial's, so each takes its own part)."""
    return max(1, int(cpus_per_worker))


class RankGroup:
    """One start of the trial's ranks."""

    def __init__(self, world: int, job: dict[str, Any]):
        self.world = world
        self.store_dir = tempfile.mkdtemp(prefix="tuner-ranks-")
        self.conns: dict[int, Connection] = {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.error: BaseException | None = None   # the first failed rank's exception, when it pickles
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])   # where `trainables` is importable from
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        for rank in range(world):
            ours, theirs = socket.socketpair()
            proc = subprocess.Popen(
                [sys.executable, "-m", "trainables.runtime.ranks", str(theirs.fileno()), str(os.getpid())],
                pass_fds=[theirs.fileno()], env=env)
            theirs.close()
            conn = Connection(ours.detach())
            conn.send({**job, "rank": rank, "world": world, "store": os.path.join(self.store_dir, "store")})
            self.conns[rank], self.procs[rank] = conn, proc

    def stop(self) -> None:
        """End every rank still running (SIGTERM, then SIGKILL) and remove the store."""
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for c in self.conns.values():
            c.close()
        shutil.rmtree(self.store_dir, ignore_errors=True)

    def serve(self, report: Callable[[dict[str, Any], str | None], None]) -> str | None:
        """Forward rank 0's reports until every rank is done: None, or what went wrong first."""
        open_ = dict(self.conns)
        done: set[int] = set()
        while open_:
            for ready in wait(list(open_.values())):
                conn = cast(Connection, ready)
                rank = next(r for r, c in open_.items() if c is conn)
                who = f"rank {rank}" if self.world > 1 else "the training process"
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    del open_[rank]
                    if rank not in done:
                        code = self.procs[rank].wait()
                        return f"{who} exited with code {code} before it finished"
                    continue
                kind = msg[0]
                if kind == "report":
                    report(msg[1], msg[2])
                    conn.send(True)
                elif kind == "done":
                    done.add(rank)
                elif kind == "error":
                    self.error = msg[2] if len(msg) > 2 else None
                    return f"{who} failed: {msg[1]}"
        return None


def run_ranks(world: int, job: dict[str, Any], session, restarts: int) -> None:
    """Train with `world` ranks on this node; rank 0's reports go to `session` (the trial's)."""
    failures = 0
    while True:
        resume = session.get_checkpoint()
        group = RankGroup(world, {**job, "resume": resume, "earlier": session.earlier_checkpoints() if resume else []})
        try:
            problem = group.serve(session.report)
        finally:
            group.stop()
        if problem is None:
            return
        failures += 1
        if failures > restarts:
            if world == 1:   # the training process's own error, as if it had trained in this one
                if group.error is not None:
                    raise group.error
                raise RankError(problem)
            raise RankError(f"{problem} (the ranks were restarted {restarts} time(s), resources.worker_failures)")
        print(f"tuner: {problem}; restarting the {world} ranks from the latest checkpoint "
              f"({failures} of {restarts})", file=sys.stderr, flush=True)


def die_with(parent: int, sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when the trial's process ends, however it ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):  # not Linux: the trial's stop() still ends the ranks
        pass
    if os.getppid() != parent:  # it ended before the signal was armed
        os._exit(1)


def serve_rank(fd: int) -> None:
    """Run as the rank the trial describes over `fd`; never returns."""
    conn = Connection(fd)
    job = conn.recv()
    try:
        import torch
        import torch.distributed as dist

        from trainables.loop import train_loop
        from trainables.runtime.session import RankSession
        torch.set_num_threads(job["threads"])
        if job.get("log"):   # `tuner train`: rank 0's epoch lines on its output, as one process prints them
            logging.basicConfig(level=job["log"] if job["rank"] == 0 else logging.WARNING, format="%(message)s",
                                stream=sys.stdout)
        session = RankSession(job["rank"], job["world"], job["device"], conn, job["resume"], job["earlier"])
        if session.device.type == "cuda":
            torch.cuda.set_device(session.device)
        if job["world"] > 1:
            dist.init_process_group("nccl" if session.device.type == "cuda" else "gloo",
                                    init_method=f"file://{job['store']}", rank=job["rank"], world_size=job["world"])
        train_loop(job["config"], session)
        conn.send(("done",))
    except BaseException as e:  # noqa: BLE001 - every failure goes to the trial, which restarts or fails the group
        import traceback
        where = traceback.format_exc()
        try:
            try:
                raised = pickle.loads(pickle.dumps(e))
                raised.add_note(f"raised in the training process (pid {os.getpid()}):\n{where}")
            except Exception:  # noqa: BLE001 - an exception that does not pickle goes as its text only
                raised = None
            conn.send(("error", f"{type(e).__name__}: {e}", raised))
        except (OSError, pickle.PicklingError):
            pass
        sys.stderr.write(where)
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # no process-group teardown: every rank is done, and the trial removes the store


if __name__ == "__main__":
    die_with(int(sys.argv[2]))
    serve_rank(int(sys.argv[1]))
