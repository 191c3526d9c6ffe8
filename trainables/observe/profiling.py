"""`profile: true`: torch.profiler over a few training steps of one trial, rank 0.

The first trial (rank 0) to start claims the profile folder with an exclusive create, so an
experiment gets one profile however many trials run at once.  The trace is Chrome-trace JSON
(Perfetto and chrome://tracing open it), beside it a table of the top operators, also logged.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)

WAIT, WARMUP, ACTIVE = 1, 1, 3  # steps: skipped, traced but dropped, recorded
CLAIM = "claimed"
TRACE = "trace.json"
TABLE = "top_ops.txt"


def _claim(folder: Path) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


class StepProfiler:
    """Call step() after every optimizer step; it records WAIT + WARMUP + ACTIVE steps, writes
    the trace and the table, then does nothing."""

    def __init__(self, folder: Path, device: torch.device):
        self.folder = folder
        self.done = False
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=activities, record_shapes=True,
            schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
            on_trace_ready=self._write)
        self.prof.start()

    def _write(self, prof) -> None:
        prof.export_chrome_trace(str(self.folder / TRACE))
        sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=20)
        (self.folder / TABLE).write_text(table + "\n")
        log.info("profile of %d steps written to %s; top operators:\n%s", ACTIVE, self.folder / TRACE, table)
        self.done = True

    def step(self) -> None:
        if self.done:
            return
        self.prof.step()
        if self.done:
            self.prof.stop()

    def close(self) -> None:
        """End early (the trial ended first): whatever the schedule recorded is written."""
        if not self.done:
            self.prof.stop()
            self.done = True


def maybe_profiler(enabled: bool, folder: str, rank: int, device: torch.device) -> StepProfiler | None:
    if not enabled or rank != 0 or not folder or not _claim(Path(folder)):
        return None
    return StepProfiler(Path(folder), device)
