"""The service's client side: `tuner service start`, `submit`, `queue`, `cancel`, `logs`.

Each joins a running cluster (`--address`, RAY_ADDRESS, else the local head `ray start` left),
finds the dispatcher (tuner/dispatcher.py) and calls it.  When the dispatcher is gone, `submit`
and `queue` re-create it from the settings saved beside the registry (the head keeps where that
is in TUNER_HOME/service.json).  `submit` checks everything it can before anything reaches the
cluster: the file (as `validate`), that one trial fits the cluster, and that the experiment's
storage is usable from the head.
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from trainables import settings

from .cluster import ClusterError
from .registry import RegistryError, ServiceSettings, load_settings, storage_root
from .share import ACTOR, NAMESPACE


class ServiceError(RuntimeError):
    """No service (or no cluster) to talk to: one line with the command that fixes it."""


def attach(address: str | None):
    """Join the cluster as a client; its Ray context."""
    import ray

    from .console import quiet_logs
    quiet_logs(False)
    address = address or settings.read().ray_address or "auto"
    if ray.is_initialized():
        raise ServiceError("this process is connected to Ray already; the service commands run in a process of their own")
    with tempfile.TemporaryFile() as held:
        try:
            with _fd2_into(held):   # Ray's C++ client writes a warning there per retry
                ctx = ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as e:  # noqa: BLE001 - whatever ray.init raises (a ConnectionError, an AuthenticationError)
            said = " ".join(str(x) for x in (e, e.__cause__, e.__context__) if x) + _read(held)
            if isinstance(e, ray.exceptions.AuthenticationError) or "Unauthenticated" in said:
                raise ServiceError(f"refused by the cluster at {address}: this machine does not hold its token; copy "
                                   "the head's ~/.ray/auth_token here (or point RAY_AUTH_TOKEN_PATH at it) and try "
                                   "again") from None
            sys.stderr.write(_read(held))
            raise ServiceError(f"no running Ray cluster at {address} ({str(e).splitlines()[0][:200]}); start one with "
                               "`tuner service start` (a local head) or `ray up cluster/aws-gpu.yaml`, then pass its "
                               "--address") from None
        sys.stderr.write(_read(held))
        return ctx


@contextlib.contextmanager
def _fd2_into(f):
    """File descriptor 2 (stderr, Python's and the C++ core's) written into `f` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _read(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def head_node() -> str:
    import ray
    for n in ray.nodes():
        if n.get("Alive") and "node:__internal_head__" in (n.get("Resources") or {}):
            return n["NodeID"]
    raise ServiceError("the cluster has no live head node")


def on_head(fn, *args):
    """fn(*args) run by a task on the head node (no CPU reserved)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    return ray.get(task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head_node(), soft=False))
                   .remote(*args), timeout=120)


def dashboard_url(ctx) -> str:
    url = getattr(ctx, "dashboard_url", None)
    if not url:
        raise ServiceError("the cluster has no dashboard (the service starts experiments through Ray's jobs API); "
                           "start its head with the dashboard (`ray start --head --include-dashboard=true`)")
    return url


def dispatcher(ctx, storage: str | None = None, svc: ServiceSettings | None = None, create: bool = True):
    """The running dispatcher; re-created (create=True) from the settings saved beside the
    registry when it is gone, or created with `svc` (service start)."""
    import ray

    from .dispatcher import Dispatcher, actor_options, head_storage
    if svc is None:
        try:
            return ray.get_actor(ACTOR, namespace=NAMESPACE)
        except ValueError:
            if not create:
                raise ServiceError("no tuning service on this cluster; start it with `tuner service start "
                                   "--address ADDRESS`") from None
        storage = on_head(head_storage)
        if not storage:
            raise ServiceError("no tuning service on this cluster; start it with `tuner service start --address "
                               "ADDRESS [--config service.yaml]`")
    actor = ray.remote(Dispatcher).options(**actor_options(head_node())).remote(
        storage, dashboard_url(ctx), svc.model_dump() if svc is not None else None)
    try:
        ray.get(actor.ping.remote(), timeout=120)
    except ray.exceptions.RayActorError as e:
        cause = getattr(e, "cause", None) or e
        raise ServiceError(f"the dispatcher did not start: {str(cause).strip().splitlines()[-1]}") from None
    return actor


def call(method, *args):
    """An actor call; RegistryError raised there comes back as itself (one line)."""
    import ray
    try:
        return ray.get(method.remote(*args), timeout=120)
    except ray.exceptions.RayTaskError as e:
        cause = e.as_instanceof_cause() if hasattr(e, "as_instanceof_cause") else e
        if isinstance(cause, RegistryError):
            raise RegistryError(str(cause.args[0]) if cause.args else str(cause)) from None
        raise


# ---------------------------------------------------------------- verbs

def start(address: str | None, config: str | None, echo=print) -> dict[str, Any]:
    """`tuner service start`: a local persistent head when no address is given (and none runs),
    then the dispatcher with the settings of `config` (defaults without one)."""
    svc = load_settings(config) if config else ServiceSettings()
    started_head = False
    if not address and not settings.read().ray_address:
        started_head = ensure_local_head(echo)
    ctx = attach(address)
    root = storage_root(svc)
    svc = svc.model_copy(update={"storage": root})
    problem = on_head(_storage_problem, root)
    if problem:
        raise ServiceError(f"service storage {root}: {problem}; set `storage:` in service.yaml to a folder the head "
                           "can write, or a bucket URI it has credentials for")
    import ray
    try:
        old = ray.get_actor(ACTOR, namespace=NAMESPACE)
        ray.kill(old)   # settings change: the registry stays, the dispatcher is made again with them
        time.sleep(0.5)
    except ValueError:
        pass
    actor = dispatcher(ctx, str(root), svc)
    info = call(actor.ping)
    url = dashboard_url(ctx)
    echo(f"tuning service running: registry in {info['storage']}, max_running {svc.max_running}, "
         f"weights {svc.weights}")
    echo(f"Ray dashboard: http://{url} (token: ~/.ray/auth_token)")
    echo("submit with:   python -m tuner submit search_spaces/quickstart.yaml"
         + (f" --address {address}" if address else ""))
    if started_head:
        echo("stop the local head with: ray stop   (it stops every Ray on this machine); "
             "queued and running experiments continue after `tuner service start` on a new head")
    return info


def ensure_local_head(echo=print) -> bool:
    """A persistent local head (token authentication on, dashboard on 127.0.0.1), unless one runs."""
    import ray
    try:
        ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
        return False
    except Exception as e:  # noqa: BLE001 - none runs: start one
        logging.getLogger(__name__).debug("no local head (%s)", e)
    if settings.read().ray_auth_disabled:
        raise ClusterError("RAY_AUTH_MODE=disabled would start a head whose dashboard and jobs API answer anyone; "
                           "unset it")
    exe = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    cmd = [exe, "start", "--head", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
           "--disable-usage-stats", f"--num-cpus={os.cpu_count() or 1}"]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise ServiceError("`ray start --head` failed: " + (r.stderr or r.stdout).strip().splitlines()[-1])
    echo("started a local Ray head (persistent: it outlives this command)")
    return True


def _storage_problem(path: str) -> str | None:
    """Run on the head: why the folder (or bucket URI) cannot hold the registry, or None."""
    from trainables.runtime import storage
    from trainables.runtime.preflight import folder_problem
    if not storage.is_uri(path):
        try:
            Path(path).mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            return f"cannot create it ({e.strerror})"
    return folder_problem("storage", path, 1 << 20)   # a bucket: a marker written and read back


def experiment_text(exp) -> str:
    """The experiment as the service keeps it: absolute paths, so that the driver (in a Ray
    job, elsewhere) writes where the submitter meant."""
    data = exp.model_dump(mode="json", exclude_unset=True)
    data["storage_path"] = exp.storage_path
    data.setdefault("train", {})
    data["train"]["cache_dir"], data["train"]["data_root"] = exp.train.cache_dir, exp.train.data_root
    if exp.warm_start:
        data["warm_start"] = exp.warm_start
    return yaml.safe_dump(data, sort_keys=False)


def submit(file: str, overrides: list[str], address: str | None, priority: str, name: str | None,
           echo=print) -> str:
    from trainables.runtime import storage

    from .cluster import fitting_concurrency, largest_need, node_types
    from .config import load
    from .experiment import EXPERIMENT_FILE
    from .paths import settle
    from .registry import PRIORITIES
    if priority not in PRIORITIES:
        raise RegistryError(f"--priority {priority!r}: one of {', '.join(PRIORITIES)}")
    exp = settle(load(file, overrides + ([f"name={name}"] if name else [])))   # nothing is sent on error
    if storage.exists(storage.join(exp.location, EXPERIMENT_FILE)):
        raise ClusterError(f"{exp.location} exists already; choose another name (--set name=NEW or --name NEW), "
                           f"or `tuner resume {exp.location}`")
    ctx = attach(address)
    import ray
    need = largest_need(exp)
    try:
        slots = fitting_concurrency(exp, ray.cluster_resources())
    except ClusterError:
        holding = [n for n, res in node_types().items() if all(res.get(k, 0) + 1e-9 >= v for k, v in need.items() if v > 0)]
        if not holding:
            raise
        slots = min(exp.budget.max_concurrent_trials or exp.budget.num_samples, exp.budget.num_samples)
    actor = dispatcher(ctx)   # it checks on the head that the head can write the experiment's folder
    exp_id = call(actor.submit, exp.name, getpass.getuser(), priority, experiment_text(exp), exp.location,
                  {k: float(v) for k, v in need.items()}, slots)
    where = f" --address {address}" if address else ""
    echo(f"submitted {exp_id}: {exp.name}, priority {priority}, results in {exp.location}")
    echo(f"Ray dashboard: http://{dashboard_url(ctx)} (token: ~/.ray/auth_token)")
    echo(f"watch:  python -m tuner queue{where}    python -m tuner logs {exp_id}{where}")
    echo(f"cancel: python -m tuner cancel {exp_id}{where}")
    return exp_id


def queue(address: str | None) -> dict[str, Any]:
    ctx = attach(address)
    return call(dispatcher(ctx).queue)


def cancel(exp_id: str, address: str | None, force: bool) -> dict[str, Any]:
    ctx = attach(address)
    return call(dispatcher(ctx).cancel, exp_id, getpass.getuser(), force)


def record(exp_id: str, address: str | None) -> dict[str, Any]:
    ctx = attach(address)
    return call(dispatcher(ctx).record, exp_id)


def logs(exp_id: str, address: str | None, follow: bool, out=sys.stdout) -> int:
    """Print the driver's log; with follow, until the driver ends."""
    ctx = attach(address)
    actor = dispatcher(ctx)
    shown = 0
    while True:
        got = call(actor.logs, exp_id)
        text = got["text"]
        out.write(text[shown:])
        out.flush()
        shown = len(text)
        if not follow or not got["live"]:
            return 0
        time.sleep(1.0)


def experiment_location(arg: str) -> str:
    """An experiment folder (or URI) as given, or the folder of a registry id when this machine
    holds the service's registry (the head: TUNER_HOME/service.json says where).  Never connects
    to a cluster: a folder that is missing is reported by the command as such."""
    from trainables.runtime.storage import is_uri

    from .dispatcher import head_storage
    from .registry import Registry
    if is_uri(arg) or Path(arg).exists() or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", arg):
        return arg
    storage = head_storage()
    if not storage:
        return arg
    try:
        return Registry(storage).get(arg).location
    except (RegistryError, OSError):   # the bucket unreachable from here: the command reports the argument
        return arg
