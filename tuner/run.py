"""Ray connection, feasibility, the Tuner (Optuna TPE + ASHA), fit and resume."""
from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any, Callable

import yaml

from trainables import forkserver, storage
from trainables.preflight import MARKER, PREFLIGHT_ENV, PreflightError, check_folders
from trainables.trainable import KEEP_BEST, local_resources, make_trainable, trial_resources

from . import local_ray
from .config import Experiment, ExperimentError

EXPERIMENT_FILE = "tuner-experiment.yaml"
# Ray Train's controller polls its workers this often (default 2 s); shorter ends a
# TorchTrainer trial ~6 s sooner after its last report.
TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
# A snapshot per checkpoint is what keeps the best and latest checkpoints safe; Tune
# would warn about it every few seconds on short trials.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")


class ClusterError(RuntimeError):
    """The cluster cannot run the experiment (too small, unreachable)."""


def connect(address: str | None, exp: Experiment, echo: Callable[[str], None] = print,
            allow_no_auth: bool = False, verbose: bool = False, env: dict[str, str] | None = None) -> str | None:
    """Join `address` / RAY_ADDRESS, or start an embedded local Ray with its dashboard on
    127.0.0.1 (token authentication stays on; refused when the environment turns it off,
    unless the user says so).  The session folder of a Ray started here, else None."""
    import ray

    from .console import quiet_logs
    quiet_logs(verbose)
    if ray.is_initialized():
        return None
    local = not (address or os.environ.get("RAY_ADDRESS"))
    if local and os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled" and not allow_no_auth:
        raise ClusterError("RAY_AUTH_MODE=disabled in the environment would start a local Ray whose dashboard, "
                           "jobs API and ports answer anyone who can reach them; unset it (token authentication "
                           "is the default) or pass --allow-no-auth to accept that")
    log_level = logging.INFO if verbose else logging.WARNING
    for k, v in TRAIN_ENV.items():
        os.environ.setdefault(k, v)
    runtime_env = {"env_vars": {**{k: os.environ[k] for k in TRAIN_ENV}, **(env or {})}}
    # The trials on this machine fork their training processes from one warm process
    # (trainables/forkserver.py); TUNER_FORK_SERVER=off starts none.
    if os.environ.get(forkserver.ENV, "").lower() != "off" and forkserver.start():
        runtime_env["env_vars"][forkserver.ENV] = os.environ[forkserver.ENV]
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ctx = ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=log_level)
        except Exception as e:
            raise ClusterError(f"cannot connect to Ray at {address}: {e}") from None
        echo(f"connected to Ray at {address}")
    else:
        need = largest_need(exp)
        # Logical CPUs: at least one trial must fit, even on a 2-core laptop.
        cpus = max(os.cpu_count() or 1, math.ceil(need["CPU"]))
        # No spot instances on an embedded local Ray: skip Ray Train's preemption watcher,
        # one more process per DDP trial (~1.5 s of CPU at start on a small machine).
        os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        runtime_env["env_vars"]["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] = os.environ["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"]
        ctx = ray.init(address="local", num_cpus=cpus, include_dashboard=True, dashboard_host="127.0.0.1",
                       runtime_env=runtime_env, log_to_driver=False, logging_level=log_level)
        echo(f"started a local Ray ({cpus} logical CPUs)")
    url = getattr(ctx, "dashboard_url", None)
    if url:
        token = Path.home() / ".ray" / "auth_token"
        hint = f" (token: {token})" if token.exists() else ""
        echo(f"Ray dashboard: http://{url}{hint}")
    return None if address else ctx.address_info["session_dir"]


def _fit(exp: Experiment, tuner, session_dir: str | None):
    """Tuner.fit(), with the embedded Ray (if any) recorded in the experiment folder while it runs."""
    if not session_dir:
        return tuner.fit()
    local_ray.record(exp.exp_dir, session_dir)
    try:
        return tuner.fit()
    finally:  # this process shuts its Ray down as it ends; only a killed one leaves processes behind
        local_ray.forget(exp.exp_dir)


def preflight(exp: Experiment) -> None:
    """The folders the run writes are usable: checked before Ray starts or a folder is made."""
    folders = {"storage_path": exp.storage_path if exp.remote else exp.exp_dir.parent,
               "train.cache_dir": exp.base_config()["cache_dir"]}
    if exp.remote:
        folders["the local copy of the experiment"] = exp.exp_dir.parent
    check_folders(folders)


class NodeCheck:
    """The run's marker in the storage path, which every node (and every trial, on whatever node
    it lands) must read back: proof that it sees the driver's storage, not a folder of the same
    name.  `env` carries it to the trials; `check_nodes` asks every node now."""

    def __init__(self, exp: Experiment):
        import secrets

        from trainables.preflight import versions
        self.path = storage.join(exp.storage_path if exp.remote else exp.exp_dir.parent, f"{MARKER}-{exp.name}")
        self.token = secrets.token_hex(16)
        self.versions = versions()
        self.env = {PREFLIGHT_ENV: f"{self.path}\n{self.token}\n" + " ".join(self.versions[k] for k in ("python", "ray", "torch"))}

    def check_nodes(self, timeout_s: float = 180) -> None:
        """Write the marker, then a task pinned to every alive node runs the checks;
        PreflightError naming each node that fails.  No task when the driver's own node is the
        whole cluster (checked already)."""
        import ray
        storage.write_bytes(self.path, self.token.encode())
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from trainables.preflight import node_problems
        alive = [n for n in ray.nodes() if n["Alive"]]
        if len(alive) == 1 and alive[0]["NodeID"] == ray.get_runtime_context().get_node_id():
            return
        task = ray.remote(num_cpus=0, max_retries=0)(node_problems)
        refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            self.path, self.token, self.versions, n["Resources"].get("GPU", 0)) for n in alive]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        problems = []
        for n, ref in zip(alive, refs):
            where = f"node {n['NodeManagerAddress']} ({n['NodeID'][:12]})"
            if ref not in ready:
                problems.append(f"{where}: did not answer within {timeout_s:g} s")
                continue
            try:
                found = ray.get(ref)
            except ray.exceptions.RayError as e:
                if not any(m["NodeID"] == n["NodeID"] and m["Alive"] for m in ray.nodes()):
                    # Removed or preempted between the listing and its check: nothing runs there.
                    logging.getLogger(__name__).warning("%s left the cluster during the preflight; not checked", where)
                    continue
                found = [f"the check could not run there ({storage.first_line(e)})"]
            problems += [f"{where}: {p}" for p in found]
        if problems:
            raise PreflightError("preflight failed on the cluster, no trial was started:\n"
                                 + "\n".join(f"  - {p}" for p in problems))

    def remove(self) -> None:
        storage.remove(self.path)


def largest_need(exp: Experiment) -> dict[str, float]:
    """What the hungriest trial of the search takes: reservations follow each trial's config
    (the torch loader's num_workers), so the largest draw decides what must fit."""
    from .config import _candidates, scenarios
    base = exp.base_config()
    r = exp.resources
    needs = []
    for flat, _ in scenarios(exp.search):  # each branch of a conditional space on its own
        loaders = _candidates(flat["loader"]) if "loader" in flat else [base["loader"]]
        counts = _candidates(flat["num_workers"]) if "num_workers" in flat else [base["num_workers"]]
        # A trial whose ranks run on its own node needs no Train driver; unresolved "auto" counts one.
        need_of = local_resources if r.workers > 1 and r.ddp == "local" else trial_resources
        needs += [need_of(r.workers, r.cpus_per_worker, r.gpus_per_worker, {"loader": lo, "num_workers": n},
                          r.accelerator or "") for lo in loaders for n in counts]
    return max(needs, key=lambda d: (d.get("GPU", 0.0), d["CPU"]))


def fitting_concurrency(exp: Experiment, cluster: dict[str, float], free: dict[str, float] | None = None) -> int:
    """How many trials run at once: as many of the largest draw as fit in what is free now (the
    total when `free` is not given; at least one, which waits when another experiment holds
    the cluster).  ClusterError when not even one fits the whole cluster."""
    need = largest_need(exp)
    fits = []
    for res, amount in need.items():
        if amount <= 0:
            continue
        have = cluster.get(res, 0.0)
        if have + 1e-9 < amount:
            r = exp.resources
            raise ClusterError(
                f"one trial needs {amount:g} {res} (resources: workers={r.workers}, cpus_per_worker="
                f"{r.cpus_per_worker:g}, gpus_per_worker={r.gpus_per_worker:g}"
                + (f", accelerator={r.accelerator}" if r.accelerator else "")
                + (", and the torch loader's num_workers" if res == "CPU" and amount > r.cpus_per_worker * r.workers + 0.5
                   else "") + f") but the cluster has {have:g}; lower resources.* or add nodes")
        pool = free.get(res, 0.0) if free is not None else have
        fits.append(int(pool // amount + 1e-9))
    cap = min(fits) if fits else exp.budget.num_samples
    if exp.budget.max_concurrent_trials:
        cap = min(cap, exp.budget.max_concurrent_trials)
    return max(1, min(cap, exp.budget.num_samples))


AUTOSCALER_CONFIG_ENV = "TUNER_AUTOSCALER_CONFIG"
# Where `ray up` leaves the autoscaler's config on the head node (where a job's driver runs).
BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"


def node_types() -> dict[str, dict[str, float]]:
    """The worker node types the cluster's autoscaler may start (name -> one node's resources),
    from TUNER_AUTOSCALER_CONFIG or `ray up`'s config on the head; {} when there is none."""
    path = Path(os.environ.get(AUTOSCALER_CONFIG_ENV) or BOOTSTRAP_CONFIG).expanduser()
    if not path.is_file():
        return {}
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    head = cfg.get("head_node_type")
    return {name: {k: float(v) for k, v in (t.get("resources") or {}).items()}
            for name, t in (cfg.get("available_node_types") or {}).items()
            if name != head and int(t.get("max_workers", cfg.get("max_workers", 0)) or 0) > 0}


def concurrency_for(exp: Experiment, echo: Callable[[str], None] = print) -> int:
    """Concurrency against the cluster as it is, or, when a trial does not fit it now, against
    what its autoscaler can add: then the autoscaler is asked for the resources and the run says
    it waits.  ClusterError only when neither the cluster nor any node type holds a trial."""
    import ray
    try:
        return fitting_concurrency(exp, ray.cluster_resources(), ray.available_resources())
    except ClusterError as now:
        need = largest_need(exp)
        holding = [name for name, res in node_types().items()
                   if all(res.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0)]
        if not holding:
            raise now from None
    from ray.autoscaler.sdk import request_resources
    cap = exp.budget.max_concurrent_trials or exp.budget.num_samples
    cap = min(cap, exp.budget.num_samples)
    request_resources(bundles=[need] * cap)
    echo(f"the cluster cannot hold a trial ({', '.join(f'{v:g} {k}' for k, v in need.items())}) yet: "
         f"asked its autoscaler for {cap} (node type {', '.join(holding)}); trials wait until nodes join")
    return cap


def resolve_ddp(exp: Experiment) -> Experiment:
    """The experiment with `resources.ddp` decided for this cluster.  "auto" becomes "local" when
    a node that is up holds all of a trial's ranks; else "train" when the nodes up now hold them
    together; else "local" when a node type of the autoscaler would; else "train".  A spreading
    placement strategy is always "train"; "local" that no node can hold is refused.  Connected
    to Ray; what the user wrote (and the saved YAML) keeps "auto"."""
    r = exp.resources
    if r.workers < 2 or r.ddp == "train":
        return exp
    local = exp.model_copy(update={"resources": r.model_copy(update={"ddp": "local"})})
    train = exp.model_copy(update={"resources": r.model_copy(update={"ddp": "train"})})
    if r.placement_strategy in ("SPREAD", "STRICT_SPREAD"):
        return train
    import ray
    need = largest_need(local)

    def holds(res: dict[str, float], want: dict[str, float]) -> bool:
        return all(res.get(k, 0.0) + 1e-9 >= v for k, v in want.items() if v > 0)
    if any(holds(n.get("Resources") or {}, need) for n in ray.nodes() if n.get("Alive")):
        return local
    if r.ddp == "auto" and holds(ray.cluster_resources(), largest_need(train)):
        return train   # the nodes up now hold the ranks together: no waiting for a bigger node
    if any(holds(res, need) for res in node_types().values()):
        return local
    if r.ddp == "local":
        raise ClusterError(f"resources.ddp: local needs one node with {', '.join(f'{v:g} {k}' for k, v in need.items())} "
                           f"for a trial's {r.workers} ranks, and no node (nor node type) has that; use ddp: auto "
                           "(Ray Train places the ranks on several nodes) or lower resources.*")
    return train


def ready_train_view(exp: Experiment) -> None:
    """DDP trials: start Ray Train's state actor (what the dashboard's Train view reads) before
    the first trial, and wait until it answers.  Left to the first trial, it starts while that
    trial runs, and the updates its controller queued for it are lost if Tune ends the trial
    first: the run then shows as SCHEDULING for ever."""
    if exp.resources.workers < 2 or exp.resources.ddp == "local":
        return
    import ray
    try:
        from ray.train.v2._internal.state.state_actor import get_or_create_state_actor
        ray.get(get_or_create_state_actor().get_train_runs.remote(), timeout=120)
    except Exception as e:  # noqa: BLE001 - the Train view is a view: the run goes on without it
        logging.getLogger(__name__).warning("Ray Train's state actor did not start (%s): the dashboard's Train "
                                            "view may miss this run", e)


def build_tuner(exp: Experiment, concurrency: int, verbose: bool = False):
    from ray import tune

    from .searcher import JOURNAL, journal_storage, make_searcher
    from .space import param_space
    from .tensorboard import TrialTensorBoard
    multi = exp.second_objective is not None
    # One objective: Tune gets metric/mode for the scheduler (and its trial table).  Two: the
    # searcher gets both, ASHA stops on the first.  The searcher holds the space and its
    # objectives itself (define-by-run); Tune's param_space has the fixed settings only.
    exp.exp_dir.mkdir(parents=True, exist_ok=True)
    journal = exp.exp_dir / JOURNAL
    # Nothing searched: the trials repeat the fixed settings (Tune's own generator; Optuna
    # would have no space to sample).
    searcher = make_searcher(exp.search, exp.metrics if multi else exp.metric, exp.modes if multi else exp.mode,
                             exp.seed, exp.budget, storage=journal_storage(journal),
                             study_name=exp.name) if exp.search else None
    if searcher is not None and exp.remote:
        # Tune uploads the searcher's snapshot folder: the journal goes with it.
        searcher.journal_upload = str(journal)
    scheduler = asha(exp.budget, exp.metric if multi else None, exp.mode if multi else None)
    return tune.Tuner(
        trainable_for(exp),
        param_space=param_space(exp),
        tune_config=tune.TuneConfig(metric=None if multi else exp.metric, mode=None if multi else exp.mode,
                                    search_alg=searcher, scheduler=scheduler, num_samples=exp.budget.num_samples,
                                    max_concurrent_trials=concurrency, time_budget_s=exp.budget.time_limit_s,
                                    reuse_actors=True, trial_dirname_creator=trial_folder_name),
        run_config=tune.RunConfig(
            name=exp.name, storage_path=exp.storage_path if exp.remote else str(exp.exp_dir.parent),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_BEST, checkpoint_score_attribute=exp.metric,
                                                    checkpoint_score_order=exp.mode),  # best two + latest
            failure_config=tune.FailureConfig(max_failures=exp.resources.max_failures),
            verbose=1 if verbose else 0,
            # Files a trial writes in its folder (the model's TensorBoard views) reach the
            # experiment folder from whichever node ran it.
            sync_config=tune.SyncConfig(sync_artifacts=True),
            callbacks=[TrialTensorBoard([p.name for p in exp.searched], exp.metric), console_for(exp)]),
    )


# How ASHA's rung cutoff is taken (the benchmark's lever): "ranked", a value some trial recorded
# at the rung; "interpolated", Ray's own, interpolated between recorded values.
ASHA_CUTOFF = "ranked"


def asha(budget, metric: str | None = None, mode: str | None = None, cutoff: str | None = None):
    """The scheduler every search runs under: ASHA over the budget's epochs.  A trial goes on
    past a rung if it is not below the top 1/eta of the trials recorded there before it, the
    cutoff taken by rank (numpy's "nearest" percentile): Ray's own interpolates between values,
    so one diverging trial's loss of 1000 at a rung would put the cutoff far above chance level
    and let every chance-level trial after it through."""
    from ray.tune.schedulers import ASHAScheduler
    s = ASHAScheduler(time_attr="epoch", metric=metric, mode=mode, max_t=budget.max_epochs,
                      grace_period=budget.grace_epochs, reduction_factor=budget.reduction_factor)
    if (cutoff or ASHA_CUTOFF) == "ranked":
        from .searcher import RankedBracket
        for b in s._brackets:     # Ray has no public hook for the cutoff: its bracket, subclassed
            b.__class__ = RankedBracket
    return s


def trial_folder_name(trial) -> str:
    """`trial_<id>`: short, and the id the console and `status` print (Tune's default name
    strings every setting together)."""
    return f"trial_{trial.trial_id}"


def console_for(exp: Experiment):
    from .console import Console
    b = exp.budget
    return Console(total=b.num_samples, metric=exp.metric, mode=exp.mode, searched=[p.name for p in exp.searched],
                   max_epochs=b.max_epochs, grace_epochs=b.grace_epochs, reduction_factor=b.reduction_factor)


def trainable_for(exp: Experiment):
    r = exp.resources
    return make_trainable(r.workers, r.cpus_per_worker, r.gpus_per_worker, storage.join(exp.location, "train-runs"),
                          worker_failures=r.worker_failures, keep_by=(exp.metric, exp.mode),
                          accelerator=r.accelerator or "", placement_strategy=r.placement_strategy,
                          ddp="local" if r.ddp == "local" else "train")


def _save_experiment(exp: Experiment) -> None:
    data = exp.model_dump(mode="json", exclude_unset=True)  # what the user wrote, not every default
    write_file(exp, EXPERIMENT_FILE, yaml.safe_dump(data, sort_keys=False))


def write_file(exp: Experiment, name: str, text: str) -> None:
    """A file of the experiment folder: in the folder, and for cloud storage also in the local copy."""
    exp.exp_dir.mkdir(parents=True, exist_ok=True)
    (exp.exp_dir / name).write_text(text)
    if exp.remote:
        storage.write_bytes(storage.join(exp.location, name), text.encode())


def _state_file(rel: str, journal: bool) -> bool:
    """What `pull` copies: everything but checkpoints (fetched one by one when needed) and,
    unless asked for, the searcher's journal (only resume needs it; a run on this machine may
    be appending to the local one)."""
    from .searcher import JOURNAL
    parts = rel.split("/")
    return not any(p.startswith("checkpoint_") for p in parts) and (journal or parts[-1] != JOURNAL)


def pull(exp: Experiment, journal: bool = False) -> list[str]:
    """Bring a cloud experiment's state into its local copy (nothing to do for a folder)."""
    if not exp.remote:
        return []
    return storage.download(exp.location, exp.exp_dir, lambda rel: _state_file(rel, journal))


def local_checkpoint(exp: Experiment, path: str) -> str:
    """A trial checkpoint folder on this machine: for cloud storage, fetched into the local copy."""
    if not exp.remote or Path(path).is_dir():
        return path
    _, root = storage.filesystem(exp.location)
    # A path on the bucket (a DDP trial's, from its report), or Tune's for the local copy,
    # which for a cloud experiment holds the bucket's path after the copy's own: the part
    # after the experiment's path on the bucket is the checkpoint's place in the folder.
    at = path.rfind(root.rstrip("/") + "/")
    if at < 0:
        raise ExperimentError(exp.location, [f"checkpoint {path} is outside the experiment folder"])
    rel = path[at + len(root.rstrip("/")) + 1:]
    storage.download(storage.join(exp.location, *rel.split("/")), exp.exp_dir / rel)
    return str(exp.exp_dir / rel)


# Files of an experiment folder that resume/status/export unpickle or trust (Tune's and the
# searcher's state), besides the folder itself.
STATE_GLOBS = (EXPERIMENT_FILE, "experiment_state-*.json", "*.pkl", "*/params.pkl")


def untrusted(exp_dir: Path) -> list[str]:
    """State that someone else could have written: owned by another user, or writable by
    group or others.  Such a folder is refused before anything in it is unpickled."""
    me = os.getuid()
    out = []
    for p in [exp_dir, *(f for g in STATE_GLOBS for f in sorted(exp_dir.glob(g)))]:
        st = p.lstat()
        if p.is_symlink():
            out.append(f"{p} is a symbolic link")
        elif st.st_uid != me:
            out.append(f"{p} is owned by uid {st.st_uid}, not by you (uid {me})")
        elif st.st_mode & 0o002 or (st.st_mode & 0o020 and not _private_group(st.st_gid)):
            out.append(f"{p} is writable by group or others (mode {stat.filemode(st.st_mode)})")
    return out


def _private_group(gid: int) -> bool:
    """A group only this user is in (a user-private group, as umask 002 systems use)."""
    import grp
    import pwd
    try:
        g, me = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return gid == me.pw_gid and g.gr_name == me.pw_name and set(g.gr_mem) <= {me.pw_name}


def load_saved(exp_dir: str | Path, journal: bool = False) -> Experiment:
    """The experiment saved in a folder or at a cloud URI (its state downloaded into the local
    copy first; the bucket's access policy is what guards a cloud experiment's pickles)."""
    if storage.is_uri(exp_dir):
        return _load_remote(str(exp_dir), journal)
    path = Path(exp_dir) / EXPERIMENT_FILE
    if not path.is_file():
        raise ExperimentError(str(exp_dir), [f"not an experiment folder: {path} is missing "
                                             "(give the folder that `tuner run` printed)"])
    bad = untrusted(Path(exp_dir))
    if bad:
        raise ExperimentError(str(exp_dir), [
            f"refused: {b}; the folder holds pickled state that runs code when read — "
            "check who changed it, then `chmod -R go-w` it if it is yours" for b in bad])
    from .config import parse
    exp = parse(path.read_text(), str(path))
    # The folder may have moved since the run: trust where it is now.
    return exp.model_copy(update={"storage_path": str(Path(exp_dir).resolve().parent),
                                  "name": Path(exp_dir).resolve().name})


def _load_remote(location: str, journal: bool) -> Experiment:
    from .config import parse
    parent, name = storage.parent_and_name(location)
    try:
        text = storage.read_bytes(storage.join(location, EXPERIMENT_FILE)).decode()
    except FileNotFoundError:
        raise ExperimentError(location, [f"not an experiment: {storage.join(location, EXPERIMENT_FILE)} is missing "
                                         "(give the location that `tuner run` printed)"]) from None
    except Exception as e:  # noqa: BLE001 - pyarrow: credentials, endpoint, bad URI
        raise ExperimentError(location, [f"cannot read it: {storage.first_line(e)}; check the URI and "
                                         "the credentials"]) from None
    exp = parse(text, storage.join(location, EXPERIMENT_FILE))
    exp = exp.model_copy(update={"storage_path": parent, "name": name})
    pull(exp, journal)
    return exp


def run_experiment(exp: Experiment, address: str | None = None, echo: Callable[[str], None] = print,
                   allow_no_auth: bool = False, verbose: bool = False):
    """Validate-then-run: refuses an existing experiment folder, checks that a trial fits."""
    import ray

    from .paths import settle
    exp = settle(exp)   # absolute paths, and never into a Ray job's temporary copy of the working dir
    if storage.exists(storage.join(exp.location, EXPERIMENT_FILE)):
        raise ExperimentError(exp.location, [
            "this experiment folder exists already; `tuner resume " + exp.location + "` continues it, or "
            "choose another name (--set name=NEW)"])
    preflight(exp)
    if exp.remote and exp.exp_dir.exists():  # a local copy left from an experiment since deleted there
        import shutil
        shutil.rmtree(exp.exp_dir)
    local_ray.end_leftovers(exp.exp_dir.parent, echo)
    nodes = NodeCheck(exp)
    try:
        session_dir = connect(address, exp, echo, allow_no_auth, verbose, env=nodes.env)
        asked, exp = exp, resolve_ddp(exp)
        concurrency = concurrency_for(exp, echo)   # a trial no node can ever hold: refused first
        nodes.check_nodes()
        ready_train_view(exp)
        _save_experiment(asked)
        echo(f"experiment {exp.name}: {exp.budget.num_samples} trials, up to {concurrency} at once, "
             f"ASHA over {exp.budget.max_epochs} epochs; results in {exp.location}")
        echo(f"watch: tensorboard --logdir {exp.location}")
        if exp.resources.workers > 1:
            echo(f"DDP: {exp.resources.workers} ranks per trial, " + (
                "started by the trial on its node (resources.ddp: local)" if exp.resources.ddp == "local"
                else "on Ray Train workers (resources.ddp: train)"))
        return summarize(exp, _fit(exp, build_tuner(exp, concurrency, verbose), session_dir))
    finally:
        nodes.remove()


def resume_experiment(exp_dir: str | Path, address: str | None = None, echo: Callable[[str], None] = print,
                      allow_no_auth: bool = False, verbose: bool = False):
    exp = load_saved(exp_dir, journal=True)
    preflight(exp)
    local_ray.end_leftovers(exp.exp_dir.parent, echo)
    nodes = NodeCheck(exp)
    try:
        return _resume(exp, exp_dir, address, echo, allow_no_auth, verbose, nodes)
    finally:
        nodes.remove()


def _resume(exp: Experiment, exp_dir, address, echo, allow_no_auth, verbose, nodes: NodeCheck):
    import ray
    from ray import tune
    session_dir = connect(address, exp, echo, allow_no_auth, verbose, env=nodes.env)
    exp = resolve_ddp(exp)
    concurrency_for(exp, echo)
    nodes.check_nodes()
    ready_train_view(exp)
    if not tune.Tuner.can_restore(exp.location):
        raise ExperimentError(str(exp_dir), ["no Tune state to resume from in this folder"])
    from .searcher import EXPERIMENT_DIR_ENV
    os.environ[EXPERIMENT_DIR_ENV] = str(exp.exp_dir)  # where the searcher's journal is now
    tuner = tune.Tuner.restore(exp.location, trainable=trainable_for(exp), resume_unfinished=True,
                               resume_errored=True)
    echo(f"resuming {exp.location}")
    return summarize(exp, _fit(exp, tuner, session_dir))


def _last_line(text: str) -> str:
    """An error's last non-empty line: the exception itself, not Ray's wrapper."""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), text)


def summarize(exp: Experiment, results) -> dict[str, Any]:
    """The best trial by the experiment's metric (last reported value), as plain values."""
    errors = [_last_line(str(r.error)) for r in results if r.error]
    try:
        best = results.get_best_result(metric=exp.metric, mode=exp.mode, scope="last", filter_nan_and_inf=True)
    except RuntimeError:
        best = None
    from .results import trials
    pull(exp)
    unfinished = [t.trial_id for t in trials(exp) if t.state not in ("TERMINATED", "ERROR")]
    out = {"exp_dir": exp.location, "trials": len(results), "errors": errors, "unfinished": unfinished,
           "best": None}
    if best is not None and best.metrics and best.metrics.get(exp.metric) is not None:
        params = exp.params_of(best.config)
        out["best"] = {"metric": exp.metric, "value": best.metrics.get(exp.metric),
                       "epoch": best.metrics.get("epoch"), "params": params, "path": best.path}
    write_file(exp, "summary.json", json.dumps(out, indent=1, default=str))
    return out
