"""The dispatcher: a detached Ray actor on the head (no CPU reserved) that keeps the registry,
starts queued experiments as Ray jobs, retries failed ones and divides the cluster among them.

It holds no state that the registry does not: killed, it is re-created (from the settings saved
beside the registry) by the next `submit` or `queue`, and on start it reads every record.  A
record's `job` is its lease: an experiment whose driver job is alive is never started again; one
whose job is unknown to the cluster (the head was restarted) or failed is started again with
`tuner resume` from its last checkpoints, at most `max_retries` times after a failure.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from .registry import ENDED, FORMAT, PRIORITIES, Record, Registry, RegistryError, ServiceSettings
from .share import ACTOR, NAMESPACE, Claim, Unmanaged, divide, unmanaged

log = logging.getLogger(__name__)


def pointer() -> Path:
    """On the head: the file that says where the service storage is (TUNER_HOME/service.json)."""
    from trainables import settings
    return settings.read().home / "service.json"


LIVE = ("PENDING", "RUNNING")
LOOK_S = 2.0   # how often the jobs outside the service are looked at (two calls to the dashboard)


def summary_outcome(location: str) -> dict[str, Any] | None:
    """{trials_done, best} from the summary.json in an experiment's folder or URI (parsed as
    JSON), or None while there is none."""
    from trainables.runtime import storage
    try:
        s = json.loads(storage.read_bytes(storage.join(location, "summary.json")))
        return {"trials_done": int(s["trials"]), "best": (s.get("best") or {}).get("value")}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def driver_args(location: str, file: str, resume: bool) -> list[str]:
    """What the experiment's driver runs: `resume LOCATION` once the folder (or URI) holds
    Tune's state, else `run FILE`; an experiment saved by a driver that died before Tune wrote
    its state is started afresh (its saved file removed, or `run` would refuse the folder)."""
    from trainables.runtime import storage

    from .experiment import EXPERIMENT_FILE
    names = storage.names(location)
    if any(n.startswith("experiment_state-") and n.endswith(".json") for n in names):
        return ["resume", location]
    if resume and EXPERIMENT_FILE in names:
        storage.remove(storage.join(location, EXPERIMENT_FILE))
    return ["run", file]


class Dispatcher:
    """The actor's class (made remote by `actor_options`)."""

    def __init__(self, storage: str, dashboard: str, settings: dict[str, Any] | None = None):
        self.reg = Registry(storage)
        if settings is not None:
            self.settings = ServiceSettings(**settings)
            self.reg.save_settings(self.settings)
        else:
            self.settings = self.reg.saved_settings()
        head = pointer()
        head.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        head.write_text(json.dumps({"format": FORMAT, "storage": str(self.reg.root if self.reg.remote
                                                                     else Path(storage).resolve())}))
        self.dashboard = dashboard if "://" in dashboard else f"http://{dashboard}"
        self.lock = threading.RLock()
        self.usage: dict[str, dict[str, Any]] = {}   # id -> what its driver said last: running, wanted, done, best
        self.slots: dict[str, int] = {}
        self.refused: list[str] = []
        self.others: list[Unmanaged] = []   # jobs outside the service holding trials, looked at every LOOK_S
        self.looked = 0.0
        self.started_at = time.time()
        self._client = None
        with self.lock:
            self.tick()
        threading.Thread(target=self.loop, daemon=True, name="dispatcher").start()

    # ------------------------------------------------------------ calls from clients and drivers

    def ping(self) -> dict[str, Any]:
        return {"storage": str(self.reg.root), "since": self.started_at, "settings": self.settings.model_dump()}

    def submit(self, name: str, owner: str, priority: str, text: str, location: str, need: dict[str, float],
               max_slots: int) -> str:
        if priority not in PRIORITIES:
            raise RegistryError(f"--priority {priority!r}: one of {', '.join(PRIORITIES)}")
        from trainables.runtime import storage
        if not storage.is_uri(location):   # this actor runs on the head, where the driver will write
            from trainables.runtime.preflight import folder_problem
            problem = folder_problem("storage_path", str(Path(location).parent), 1 << 20)
            if problem:
                raise RegistryError(f"storage_path {Path(location).parent} is not usable from the cluster's head: "
                                    f"{problem}; use a folder the head reaches (a shared mount) or an s3:// / gs:// URI")
        with self.lock:
            for r in self.reg.all()[0]:
                if r.location == location and r.state not in ENDED:
                    raise RegistryError(f"{location} is experiment {r.id} of the service already ({r.state}); "
                                        "choose another name (--set name=NEW)")
            exp_id = self.reg.new_id(name)
            file = self.reg.save_file(exp_id, text)
            rec = Record(id=exp_id, name=name, owner=owner, priority=priority, submitted=time.time(),  # type: ignore[arg-type]
                         file=file, location=location, need=need, max_slots=max_slots)
            self.reg.save(rec)
            self.tick()
            return exp_id

    def queue(self) -> dict[str, Any]:
        with self.lock:
            recs, bad = self.reg.all()
            rows = []
            for r in recs:
                row = r.row()
                u = self.usage.get(r.id, {})
                ended = r.state in ENDED
                row.update(running_trials=u.get("running", 0) if r.state == "running" else 0,
                           done_trials=r.trials_done if ended else u.get("done"), best=r.best if ended else u.get("best"),
                           slots=self.slots.get(r.id, 0) if r.state == "running" else 0)
                rows.append(row)
            return {"experiments": rows, "refused": bad, "capacity": self.capacity(),
                    "unmanaged": [dataclasses.asdict(u) for u in self.others]}

    def record(self, exp_id: str) -> dict[str, Any]:
        return self.reg.get(exp_id).row()

    def cancel(self, exp_id: str, user: str, force: bool) -> dict[str, Any]:
        with self.lock:
            rec = self.reg.get(exp_id)
            if rec.owner != user and not force:
                raise RegistryError(f"experiment {exp_id} was submitted by {rec.owner}, not by you ({user}); "
                                    "`tuner cancel --force` cancels it anyway")
            if rec.state in ENDED:
                raise RegistryError(f"experiment {exp_id} has {rec.state} already; nothing to cancel")
            if rec.job:
                try:
                    self.client().stop_job(rec.job)
                except Exception as e:  # noqa: BLE001 - a job the cluster no longer knows
                    log.warning("stopping job %s: %s", rec.job, e)
            rec = rec.model_copy(update={"state": "cancelled", "ended": time.time(), "message": f"cancelled by {user}"})
            self.reg.save(rec)
            self.tick()
            return rec.row()

    def logs(self, exp_id: str) -> dict[str, Any]:
        rec = self.reg.get(exp_id)
        if not rec.job:
            return {"state": rec.state, "text": "", "live": False}
        try:
            text = self.client().get_job_logs(rec.job)
            live = str(self.client().get_job_status(rec.job)) in LIVE
        except Exception:  # noqa: BLE001 - the cluster that ran it is gone: nothing to show
            text, live = "", False
        return {"state": rec.state, "text": text, "live": live}

    def share(self, exp_id: str, running: int, wanted: int, done: int = 0, best: float | None = None) -> int:
        """A driver's call: its trial slots now."""
        with self.lock:
            self.usage[exp_id] = {"running": running, "wanted": wanted, "done": done, "best": best, "at": time.time()}
            self.divide()
            return self.slots.get(exp_id, 1)

    # ------------------------------------------------------------ the loop

    def loop(self) -> None:
        while True:
            time.sleep(self.settings.poll_s)
            try:
                with self.lock:
                    self.tick()
            except Exception:  # noqa: BLE001 - the loop outlives one bad pass; the next one retries
                log.error("dispatcher pass failed:\n%s", traceback.format_exc())

    def client(self):
        if self._client is None:
            from ray.job_submission import JobSubmissionClient
            self._client = JobSubmissionClient(self.dashboard)
        return self._client

    def tick(self) -> None:
        """One pass: note ended drivers, start what may start, divide the cluster."""
        recs, self.refused = self.reg.all()
        now = time.time()
        for r in recs:
            if r.state != "running":
                continue
            status = self.job_status(r.job) if r.job else None
            if status in LIVE:
                continue
            if status == "SUCCEEDED":
                self.reg.save(r.model_copy(update={"state": "finished", "ended": now, **self.outcome(r)}))
            elif status in ("FAILED", "STOPPED") and r.attempts > self.settings.max_retries:
                self.reg.save(r.model_copy(update={"state": "failed", "ended": now, "message": self.failure(r.job),
                                                   **self.outcome(r)}))
            else:   # failed with retries left, or a driver the cluster does not know (a new head)
                self.start(r, resume=True)
        recs = self.reg.all()[0]
        running = sum(r.state == "running" for r in recs)
        order = {p: i for i, p in enumerate(PRIORITIES)}
        queued = sorted((r for r in recs if r.state == "queued"),
                        key=lambda r: (0 if now - r.submitted > self.settings.starvation_s else 1 + order[r.priority],
                                       r.submitted))
        for r in queued[:max(0, self.settings.max_running - running)]:
            self.start(r, resume=False)
        if time.monotonic() - self.looked >= LOOK_S:
            self.look_outside({r.job for r in recs if r.job})
        self.divide()

    def look_outside(self, managed: set[str]) -> None:
        """The jobs outside the service that hold trials now (Ray's job list and placement-group
        table, through the dashboard); on a failed look the last one stands."""
        from ray.util.state import list_placement_groups
        self.looked = time.monotonic()
        try:
            jobs = [{"job_id": j.job_id, "submission_id": j.submission_id, "status": str(j.status),
                     "entrypoint": j.entrypoint} for j in self.client().list_jobs()]
            groups = [{"creator_job_id": g.creator_job_id, "state": g.state, "bundles": g.bundles}
                      for g in list_placement_groups(address=self.dashboard, filters=[("state", "=", "CREATED")],
                                                     detail=True, limit=10000, raise_on_missing_output=False)]
        except Exception as e:  # noqa: BLE001 - the dashboard busy or restarting: the next pass looks again
            log.warning("looking at the jobs outside the service: %s", e)
            return
        self.others = unmanaged(jobs, groups, managed, self.capacity()["resource"])

    def outcome(self, r: Record) -> dict[str, Any]:
        """Trials and best value from the experiment's summary.json, else what its driver said."""
        u = self.usage.get(r.id, {})
        return summary_outcome(r.location) or {"trials_done": u.get("done"), "best": u.get("best")}

    def job_status(self, job: str) -> str | None:
        try:
            return str(self.client().get_job_status(job))
        except Exception:  # noqa: BLE001 - unknown to this cluster (restarted head) or unreachable
            return None

    def failure(self, job: str | None) -> str:
        if not job:
            return "failed"
        try:
            lines = [ln for ln in self.client().get_job_logs(job).splitlines() if ln.strip()]
        except Exception:  # noqa: BLE001
            lines = []
        errors = [ln for ln in lines if ln.startswith("error:")]
        return (errors or lines or ["the driver failed"])[-1][:500]

    def start(self, r: Record, resume: bool) -> None:
        """Its driver as a Ray job: `run`, or `resume` once its folder holds Tune's state."""
        from trainables import settings
        try:
            args = driver_args(r.location, self.reg.local_file(r, settings.read().home / "service-files"), resume)
        except OSError as e:   # the bucket unreachable for now: the next pass tries again
            log.warning("looking at %s: %s; trying again", r.location, e)
            return
        attempt = r.attempts + 1
        job = f"tuner-{r.id}-{attempt}"
        entry = shlex.join([sys.executable, "-m", "tuner", *args, "--address", "auto"])
        try:
            self.client().submit_job(entrypoint=entry, submission_id=job, entrypoint_num_cpus=0,
                                     runtime_env={"env_vars": {settings.SERVICE_ID: r.id}})
        except Exception as e:  # noqa: BLE001 - the jobs API not ready yet (a new head): the next pass tries again
            log.warning("starting %s: %s; trying again", r.id, e)
            self.reg.save(r.model_copy(update={"message": f"waiting for the jobs API: {str(e).splitlines()[-1][:200]}"}))
            return
        self.reg.save(r.model_copy(update={"state": "running", "job": job, "attempts": attempt, "message": None,
                                           "started": r.started or time.time()}))

    # ------------------------------------------------------------ fair share

    def capacity(self) -> dict[str, Any]:
        import ray
        total = ray.cluster_resources()
        res = "GPU" if total.get("GPU", 0) > 0 else "CPU"
        return {"resource": res, "total": float(total.get(res, 0.0)), "unmanaged": sum(u.held for u in self.others)}

    def divide(self) -> None:
        recs = [r for r in self.reg.all()[0] if r.state == "running"]
        cap = self.capacity()
        claims = []
        for r in recs:
            u = self.usage.get(r.id)
            wanted = r.max_slots if u is None else max(1, min(r.max_slots, int(u["wanted"])))
            claims.append(Claim(r.id, self.settings.weight(r.priority), float(r.need.get(cap["resource"], 0.0)), wanted))
        self.slots = divide(max(0.0, cap["total"] - cap["unmanaged"]), claims)


def actor_options(head_node: str) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"name": ACTOR, "namespace": NAMESPACE, "lifetime": "detached", "num_cpus": 0, "max_concurrency": 16,
            "get_if_exists": True, "scheduling_strategy": NodeAffinitySchedulingStrategy(head_node, soft=False),
            "runtime_env": {"env_vars": {"RAY_AUTH_MODE": "token"}}}


def head_storage() -> str | None:
    """Where the service on this head keeps its registry (run on the head), or None."""
    p = pointer()
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data.get("storage") if isinstance(data, dict) else None
