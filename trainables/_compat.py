"""Every reach into torch's internals on the training side, in one place.

Each hook names what it touches and the version it was checked against;
tests/tuner/test_compat.py runs each against the installed torch, so an upgrade that breaks one
fails by the hook's name.  Nothing else in trainables/ uses a private or undocumented member
of a library (tests/tuner/test_internals.py enforces it).  This module imports only torch: it runs
on the GPU machine's own torch too.

Checked against: torch 2.14.1 (and 2.11 on the GPU machine).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

CHECKED = {"torch": "2.14.1"}


@contextmanager
def skip_step_if(optimizer: torch.optim.Optimizer, bad: torch.Tensor):
    """hook skip_step_if: a fused optimizer skips its step on the device when
    `optimizer.found_inf` (the undocumented attribute GradScaler sets for it) is a non-zero
    tensor; set for the step, removed after it (no host read of `bad`)."""
    optimizer.found_inf = bad.float()
    try:
        yield
    finally:
        optimizer.found_inf = None

