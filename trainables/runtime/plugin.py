"""Test hooks a trial's processes load when the run names a plugin; production runs name none.

TUNER_TEST_PLUGIN (trainables.settings.TEST_PLUGIN) holds "<file.py>[::<argument>]".  The driver
hands it to every trial process through Ray's runtime_env (settings.trial_env), so it reaches
in-process trials, ranks a trial starts (they inherit the trial's environment), Ray Train
workers, other nodes and Ray jobs alike.  The file is loaded once per process and
`setup(argument)` called; each hook below is a no-op unless the plugin defines it:

  on_rank_start(rank)            a rank (or the one training process) starts training
  before_epoch(rank, epoch)      before each epoch (a test may wait here to act at a known point)
  wrap_loss(loss_fn, config, rank) -> loss_fn   the loss the step trains with

tests/fault_plugin.py is the one plugin: pid files, holds before an epoch, injected faults.
docs/internals.md says how tests use it.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trainables import settings

_loaded: dict[str, ModuleType] = {}   # spec -> module, per process


def _plugin() -> ModuleType | None:
    spec = settings.read().test_plugin
    if not spec:
        return None
    if spec not in _loaded:
        path, _, argument = spec.partition("::")
        found = importlib.util.spec_from_file_location("tuner_test_plugin", path)
        if found is None or found.loader is None:
            raise RuntimeError(f"{settings.TEST_PLUGIN}={spec!r}: {path} is not a Python file")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        if hasattr(module, "setup"):
            module.setup(argument)
        _loaded[spec] = module
    return _loaded[spec]


def on_rank_start(rank: int) -> None:
    p = _plugin()
    if p is not None and hasattr(p, "on_rank_start"):
        p.on_rank_start(rank)


def before_epoch(rank: int, epoch: int) -> None:
    p = _plugin()
    if p is not None and hasattr(p, "before_epoch"):
        p.before_epoch(rank, epoch)


def wrap_loss(loss_fn: Callable, config: dict[str, Any], rank: int) -> Callable:
    p = _plugin()
    if p is not None and hasattr(p, "wrap_loss"):
        return p.wrap_loss(loss_fn, config, rank)
    return loss_fn
