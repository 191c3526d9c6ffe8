"""Ray starts idle worker processes ahead of need; a trial placed on one still pays for
importing torch, torchvision, h5py and the training modules (about 1.5 s on 2 cores), and
so does every trial whose reservation differs from the last one's (Tune cannot reuse its
actor then).  `preload` is Ray's worker set-up hook: it imports them in a background thread
as a worker starts, so the import is done before a trial needs it.  A thread, so that the
worker registers at once and workers that never train (Tune's and Train's helpers) lose
nothing but memory."""
from __future__ import annotations

import importlib
import logging
import threading

HOOK = "trainables.warm.preload"
# What the first train_loop call would import on its own (its lazy imports included).
MODULES = ("torch", "torch._dynamo", "torchvision.transforms.v2", "h5py", "trainables.loop",
           "trainables.session", "ray.tune.trainable.function_trainable")


def _load() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a warm-up only: the trial imports (and reports) for itself
            logging.getLogger(__name__).debug("preload of %s failed: %s", name, e)


def preload() -> None:
    threading.Thread(target=_load, name="tuner-preload", daemon=True).start()
