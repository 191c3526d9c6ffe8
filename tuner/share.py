"""Fair share of one cluster among the experiments the service runs, and the driver's side of it.

The dispatcher (tuner/dispatcher.py) divides the cluster's GPUs (CPUs on a cluster without GPUs)
among the running experiments in proportion to their priority weights, counted in resources: an
experiment whose trials reserve 2 GPUs gets half the trial slots of one whose trials reserve 1 at
the same weight.  What an experiment cannot use (it wants fewer trials than its share) goes to the
others, in proportion to their weights again, so an experiment alone grows into the whole cluster.
Every running experiment gets at least one slot (no starvation among those running).
What jobs outside the service hold (`unmanaged`: their trials' placement groups) is taken off
the capacity before it is divided.  Slots are
whole trials: what rounding down leaves goes one slot at a time to the experiment furthest below
its share.

A driver started by the service asks for its slots every few seconds (`Share`); its searcher
starts a new trial (or resumes a paused one) only while it runs fewer than that.  A smaller share
stops nothing that runs: the experiment starts no new trial until it is below its share again.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from trainables import settings

log = logging.getLogger(__name__)
NAMESPACE = "tuner"
ACTOR = "tuner-dispatcher"
ASK_EVERY_S = 2.0


@dataclass(frozen=True)
class Claim:
    id: str
    weight: float    # its priority's weight
    need: float      # what one trial reserves of the shared resource (0: not shared)
    wanted: int      # the most trials it could run now


def divide(capacity: float, claims: list[Claim]) -> dict[str, int]:
    """Trial slots per experiment (see the module's text)."""
    out = {c.id: max(1, c.wanted) for c in claims if c.need <= 0}   # trials that take none of it
    claims = [c for c in claims if c.need > 0]
    alloc: dict[str, float] = {}
    active = list(claims)
    left = capacity
    while active:   # water-filling by weight, capped by what each wants
        total_w = sum(c.weight for c in active)
        capped = [c for c in active if left * c.weight / total_w >= c.wanted * c.need]
        if not capped:
            for c in active:
                alloc[c.id] = left * c.weight / total_w
            break
        for c in capped:
            alloc[c.id] = c.wanted * c.need
            left -= alloc[c.id]
            active.remove(c)
    slots = {c.id: max(1, min(c.wanted, math.floor(alloc.get(c.id, 0.0) / c.need + 1e-9))) for c in claims}
    free = capacity - sum(slots[c.id] * c.need for c in claims)
    while True:   # whole slots left by rounding: to whoever is furthest below its share
        fits = [c for c in claims if slots[c.id] < c.wanted and c.need <= free + 1e-9]
        if not fits:
            break
        c = min(fits, key=lambda c: (slots[c.id] * c.need - alloc.get(c.id, 0.0)) / c.weight)
        slots[c.id] += 1
        free -= c.need
    return {**out, **slots}


@dataclass(frozen=True)
class Unmanaged:
    """A live Ray job outside the service that holds trials on the cluster (a `tuner run
    --address`, a Tune script, a job submitted by hand): shown by `queue`, subtracted from what
    the service divides."""
    job: str         # its Ray job id
    entrypoint: str  # the command that started it
    trials: int      # placement groups it holds (Tune reserves one per trial)
    held: float      # what they reserve of the shared resource


def unmanaged(jobs: list[dict], groups: list[dict], managed: set[str], resource: str) -> list[Unmanaged]:
    """Jobs outside the service that hold created placement groups.  `jobs`: Ray's job list
    (job_id, submission_id, status, entrypoint); `groups`: its placement-group table
    (creator_job_id, state, bundles with unit_resources); `managed`: the submission ids of the
    service's own drivers.  Only live jobs count: a group of a job that ended is Ray's to free."""
    live = {j["job_id"]: j for j in jobs if j.get("job_id") and j.get("status") in ("PENDING", "RUNNING")
            and j.get("submission_id") not in managed}
    held: dict[str, list[float]] = {}
    for g in groups:
        job = str(g.get("creator_job_id"))
        if g.get("state") != "CREATED" or job not in live:
            continue
        amount = sum(float((b.get("unit_resources") or {}).get(resource, 0.0)) for b in g.get("bundles") or [])
        held.setdefault(job, []).append(amount)
    return [Unmanaged(job, " ".join(str(live[job].get("entrypoint") or "").split())[:120], len(v), sum(v))
            for job, v in sorted(held.items())]


class Share:
    """The driver's side: its slots now, asked of the dispatcher at most every ASK_EVERY_S
    without waiting on the answer (the last one stands meanwhile; `fallback` until the first).
    Pickled with the searcher, it keeps only the experiment id."""

    def __init__(self, exp_id: str, fallback: int):
        self.exp_id, self.fallback = exp_id, fallback
        self._init()

    def _init(self) -> None:
        self.slots: int | None = None
        self.pending = None
        self.asked = 0.0

    def __getstate__(self):
        return {"exp_id": self.exp_id, "fallback": self.fallback}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init()

    def now(self, running: int, wanted: int, done: int = 0, best: float | None = None) -> int:
        import ray
        if self.pending is not None:
            ready, _ = ray.wait([self.pending], timeout=0 if self.slots is not None else 10)
            if ready:
                try:
                    self.slots = int(ray.get(self.pending))
                except Exception as e:  # noqa: BLE001 - the dispatcher is gone: the last share stands
                    log.debug("no share from the dispatcher (%s)", e)
                self.pending = None
        if self.pending is None and time.monotonic() - self.asked >= ASK_EVERY_S:
            self.asked = time.monotonic()
            try:
                actor = ray.get_actor(ACTOR, namespace=NAMESPACE)
                self.pending = actor.share.remote(self.exp_id, running, wanted, done, best)
            except ValueError:   # no dispatcher now: the last share stands
                pass
        return self.fallback if self.slots is None else self.slots


def from_env(fallback: int) -> Share | None:
    """The driver's Share when the service started it, else None."""
    exp_id = settings.read().service_id
    return Share(exp_id, fallback) if exp_id else None
