"""What the cluster can hold: the largest trial, how many run at once, the autoscaler's node types,
where DDP ranks run, and the preflight of the folders and of every node."""
from __future__ import annotations

import logging
from collections.abc import Callable

import yaml

from trainables import settings
from trainables.runtime import storage
from trainables.runtime.preflight import (
    MARKER,
    PreflightError,
    check_folders,
)
from trainables.runtime.trainable import local_resources, trial_resources
from tuner.schema import Experiment


class ClusterError(RuntimeError):
    """The cluster cannot run the experiment (too small, unreachable)."""


def preflight(exp: Experiment) -> None:
    """The folders the run writes are usable, and CIFAR-10 files the driver holds are intact:
    checked before Ray starts or a folder is made."""
    folders = {"storage_path": exp.storage_path if exp.remote else exp.exp_dir.parent,
               "train.cache_dir": exp.base_config()["cache_dir"]}
    if exp.remote:
        folders["the local copy of the experiment"] = exp.exp_dir.parent
    check_folders(folders)
    cfg = exp.base_config()
    if cfg["dataset"] == "cifar10":
        from trainables.data.sources import cifar_problems
        bad = cifar_problems(cfg["data_root"])
        if bad:
            raise PreflightError("preflight failed, nothing was started:\n" + "\n".join(f"  - {p}" for p in bad))


class NodeCheck:
    """The run's marker in the storage path, which every node (and every trial, on whatever node
    it lands) must read back: proof that it sees the driver's storage, not a folder of the same
    name.  `env` carries it to the trials; `check_nodes` asks every node now."""

    def __init__(self, exp: Experiment):
        import secrets

        from trainables.runtime.preflight import versions
        self.path = storage.join(exp.storage_path if exp.remote else exp.exp_dir.parent, f"{MARKER}-{exp.name}")
        self.token = secrets.token_hex(16)
        self.versions = versions()
        self.env = {settings.PREFLIGHT: f"{self.path}\n{self.token}\n" + " ".join(self.versions[k] for k in ("python", "ray", "torch"))}

    def check_nodes(self, timeout_s: float = 180) -> None:
        """Write the marker, then a task pinned to every alive node runs the checks;
        PreflightError naming each node that fails.  No task when the driver's own node is the
        whole cluster (checked already)."""
        import ray
        storage.write_bytes(self.path, self.token.encode())
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from trainables.runtime.preflight import node_problems
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
    from .checks import candidates
    from .schema import scenarios
    base = exp.base_config()
    r = exp.resources
    needs = []
    for flat, _ in scenarios(exp.search):  # each branch of a conditional space on its own
        loaders = candidates(flat["loader"]) if "loader" in flat else [base["loader"]]
        counts = candidates(flat["num_workers"]) if "num_workers" in flat else [base["num_workers"]]
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






def node_types() -> dict[str, dict[str, float]]:
    """The worker node types the cluster's autoscaler may start (name -> one node's resources),
    from TUNER_AUTOSCALER_CONFIG or `ray up`'s config on the head; {} when there is none."""
    path = settings.read().autoscaler_config
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
        types = node_types()
        holding = [name for name, res in types.items()
                   if all(res.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0)]
        if not holding and types:   # what no node type can add, not what the nodes up now lack
            short = {k: v for k, v in need.items() if v > 0 and all(res.get(k, 0.0) + 1e-9 < v for res in types.values())}
            wants = ", ".join(f"{v:g} {k}" for k, v in (short or need).items() if v > 0)
            offered = "; ".join(f"{name}: {', '.join(f'{v:g} {k}' for k, v in res.items())}" for name, res in types.items())
            r = exp.resources
            raise ClusterError(f"one trial needs {wants} (resources: workers={r.workers}, cpus_per_worker="
                               f"{r.cpus_per_worker:g}, gpus_per_worker={r.gpus_per_worker:g}) but no node type of the "
                               f"cluster's autoscaler holds it ({offered}); lower resources.* or add a node type "
                               "that does") from None
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
        from . import _compat
        ray.get(_compat.train_state_actor().get_train_runs.remote(), timeout=120)
    except Exception as e:  # noqa: BLE001 - the Train view is a view: the run goes on without it
        logging.getLogger(__name__).warning("Ray Train's state actor did not start (%s): the dashboard's Train "
                                            "view may miss this run", e)

