"""Several nodes on one machine: a `ray.cluster_utils.Cluster` whose head runs no trials and
three worker nodes.  The pytest process only manages the cluster; every driver is a CLI
subprocess given its address."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fault_plugin
import psutil
import pytest
from ray_helpers import dashboard_json, free_ports, node_ports

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster
    (port,) = free_ports(1)   # the suite's own Ray holds the default dashboard port
    # The cluster's head records itself as "the" local Ray (/tmp/ray/ray_current_cluster), where
    # Ray's state API looks when given no address: put back what was there once it is gone, or
    # later Train runs of the suite would ask a dead cluster (and wait out each timeout).
    from tuner import _compat
    address_file = Path(_compat.ray_address_file())
    before = address_file.read_text() if address_file.exists() else None
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": True,
                                                       "dashboard_host": "127.0.0.1", "dashboard_port": port})
    workers = [c.add_node(num_cpus=2) for _ in range(3)]
    c.wait_for_nodes()
    yield c, workers
    for node in list(c.worker_nodes) + [c.head_node]:  # not c.shutdown(): it resets this process's Ray state
        c.remove_node(node, allow_graceful=True)   # the raylet ends its agents too
    # The cluster's nodes took over this process's internal-KV client; the suite's Ray, if this
    # process is its driver, gets it back (else its next remote function waits on a dead GCS).
    _compat.driver_kv_back()
    if before is None:
        address_file.unlink(missing_ok=True)
    else:
        address_file.write_text(before)


def _spec(tmp_path: Path, name: str, samples: int, storage: Path, epochs: int = 2, workers: int = 1,
          resources: str = "", train: str = "") -> Path:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""
name: {name}
storage_path: {storage}
seed: 2
budget: {{num_samples: {samples}, max_epochs: {epochs}, grace_epochs: {epochs}}}
resources: {{workers: {workers}, cpus_per_worker: 1{resources}}}
train: {{dataset: digits, cache_dir: {tmp_path / 'cache'}, model: convnet, width: 0.25, max_steps_per_epoch: 2{train}}}
search:
  lr: {{type: loguniform, low: 1.0e-2, high: 0.1}}
""")
    return spec


def _run(spec: Path, address: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", "run", str(spec), "--address", address],
                          check=False, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(300)
def test_every_trial_runs_on_a_worker_node_and_its_results_reach_the_storage_path(cluster, tmp_path):
    c, _ = cluster
    storage = tmp_path / "runs"
    r = _run(_spec(tmp_path, "spread", 3, storage), c.address)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    exp_dir = storage / "spread"
    folders = sorted(p.parent for p in exp_dir.glob("trial_*/result.json"))
    assert len(folders) == 3
    worker_ids = {n.node_id for n in c.worker_nodes}   # as they are now: another test may have replaced one
    for f in folders:
        rows = [json.loads(line) for line in (f / "result.json").read_text().splitlines()]
        assert rows and all(row["node_id"] in worker_ids for row in rows), (f, [row["node_id"] for row in rows])
        assert list(f.glob("events.out.tfevents.*")), f            # TensorBoard files in the storage path
        assert list(f.glob("checkpoint_*/checkpoint.pt")), f


@pytest.mark.timeout(300)
def test_a_node_that_cannot_see_the_storage_path_is_refused_by_name(cluster, tmp_path):
    c, _ = cluster
    storage = tmp_path / "runs"
    storage.mkdir()
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs {storage}"],
                           check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("needs CAP_SYS_ADMIN, to give a node its own mount namespace (unshare --mount: "
                    f"{probe.stderr.strip()}); test_a_node_whose_python_sees_another_folder_* covers the refusal without it")
    ray_bin = str(Path(sys.executable).parent / "ray")
    # A node in its own mount namespace, with an empty tmpfs over the storage folder: the path
    # exists there and is writable, but it is not the driver's folder.
    _refused_because_of_a_node(c, tmp_path, storage, [
        "unshare", "--mount", "sh", "-c",
        f"mount -t tmpfs tmpfs {storage} && exec {ray_bin} start --address={c.address} --num-cpus=1 --block "
        + " ".join(node_ports())])


# On the node it is started with, every Python process finds the storage folder's files gone
# (what a node with another disk at that path sees): a stand-in for a mount namespace.
HIDE = """
import os, pathlib
_hidden, _read = os.environ.get("TUNER_TEST_HIDDEN", ""), pathlib.Path.read_text
def _read_text(self, *args, **kwargs):
    if _hidden and str(self).startswith(_hidden + os.sep):
        raise FileNotFoundError(2, "No such file or directory", str(self))
    return _read(self, *args, **kwargs)
pathlib.Path.read_text = _read_text
"""


@pytest.mark.timeout(300)
def test_a_node_whose_python_sees_another_folder_is_refused_by_name(cluster, tmp_path):
    # The same refusal without CAP_SYS_ADMIN: the extra node's processes load a sitecustomize
    # that hides the storage folder's files from them.
    c, _ = cluster
    storage = tmp_path / "runs"
    storage.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE)
    env = {**os.environ, "PYTHONPATH": str(site), "TUNER_TEST_HIDDEN": str(storage)}
    _refused_because_of_a_node(c, tmp_path, storage, [str(Path(sys.executable).parent / "ray"), "start",
                                                      f"--address={c.address}", "--num-cpus=1", "--block",
                                                      *node_ports()], env)



def _refused_because_of_a_node(c, tmp_path: Path, storage: Path, node_cmd: list[str], env=None) -> None:
    """Start one more node with `node_cmd`; a run must then be refused naming that node (and
    only it), before any trial starts."""
    before = set(_alive_nodes(c.address))
    log = tmp_path / "extra-node.log"
    node = subprocess.Popen(node_cmd, start_new_session=True, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while not set(_alive_nodes(c.address)) - before:
            assert time.monotonic() < deadline and node.poll() is None, \
                f"the extra node did not join (exit {node.poll()}):\n{log.read_text()[-3000:]}"
            time.sleep(1)
        (extra,) = set(_alive_nodes(c.address)) - before
        r = _run(_spec(tmp_path, "unseen", 1, storage), c.address)
    finally:
        _end_group(node)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    assert "preflight failed on the cluster, no trial was started" in out and "Traceback" not in out, out[-3000:]
    bad = [ln for ln in out.splitlines() if "cannot read" in ln]
    assert len(bad) == 1 and "the storage path is not the driver's here" in bad[0] and f"({extra[:12]})" in bad[0], \
        (extra, out[-3000:])
    assert not (storage / "unseen" / "tuner-experiment.yaml").exists()


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the node's process group, then SIGKILL to whatever of it is left (its agents
    outlive `ray start --block`)."""
    members = [p for p in psutil.process_iter() if _pgid(p.pid) == proc.pid]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        psutil.wait_procs(members, timeout=3 if sig == signal.SIGTERM else 20)   # its agents ignore SIGTERM
    proc.wait(timeout=10)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _alive_nodes(address: str) -> list[str]:
    """Alive node ids, asked of the cluster from a subprocess (this process stays off it)."""
    code = (f"import ray, json; ray.init(address={address!r}, log_to_driver=False, logging_level='ERROR');"
            "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive']]))")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else []


@pytest.mark.timeout(300)
def test_a_ddp_trial_with_its_ranks_on_two_nodes_trains(cluster, tmp_path):
    c, _ = cluster
    storage = tmp_path / "runs"
    r = _run(_spec(tmp_path, "ddp2", 1, storage, workers=2,
                  resources=", placement_strategy: STRICT_SPREAD"), c.address)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    (f,) = [p.parent for p in (storage / "ddp2").glob("trial_*/result.json")]
    rows = [json.loads(line) for line in (f / "result.json").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2] and all(row["status"] == "ok" for row in rows)
    assert rows[-1]["global_batch_size"] == 2 * 64                  # two ranks' batches of 64
    trial_id = f.name.removeprefix("trial_")
    run = next(x for x in dashboard_json(c.head_node.address_info["webui_url"], "/api/train/v2/runs/v1")["train_runs"] if x["name"] == f"train-{trial_id}")
    ranks = {w["world_rank"]: w["node_id"] for w in run["attempts"][-1]["workers"]}
    worker_ids = {n.node_id for n in c.worker_nodes}   # as they are now: another test may have replaced one
    assert len(ranks) == 2 and ranks[0] != ranks[1] and set(ranks.values()) <= worker_ids, ranks
    assert rows[-1]["node_id"] == ranks[0]                           # rank 0 reports


@pytest.mark.timeout(300)
def test_a_two_worker_ddp_trial_whose_node_is_removed_resumes_on_another_without_losing_an_epoch(cluster, tmp_path):
    # Both ranks on the trial's node (resources.ddp auto: one node holds them); the node is
    # removed while the ranks wait before epoch 2.  (A one-worker trial loses its node in the
    # preemption test below.)
    rows = _lose_the_trials_node(cluster, tmp_path, "lost-ddp", preempted=False, workers=2)
    assert all(row["global_batch_size"] == 2 * 64 for row in rows), rows   # both ranks, before and after


@pytest.mark.timeout(300)
def test_a_preempted_node_does_not_use_up_the_failure_budget(cluster, tmp_path):
    # max_failures 0: a failure ends the trial; a spot preemption (the node drained with
    # Ray's PREEMPTION reason, as the autoscaler does before a spot node goes) does not count.
    _lose_the_trials_node(cluster, tmp_path, "spot", preempted=True)


def _lose_the_trials_node(cluster, tmp_path: Path, name: str, preempted: bool, workers: int = 1) -> list[dict]:
    """A 1-trial run whose node goes away after epoch 1 (drained as preempted first, or not):
    the trial resumes on another node from its epoch-1 checkpoint and finishes; its rows."""
    c, _ = cluster
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "hold").write_text("2")                  # every trial waits before epoch 2 (epoch 1 checkpointed)
    storage = tmp_path / "runs"
    spec = _spec(tmp_path, name, 1, storage, epochs=3, workers=workers,
                 resources=", max_failures: 0" if preempted else "")
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", c.address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **fault_plugin.env(dir=faults)})
    try:
        result = None
        deadline = time.monotonic() + 120
        while result is None:
            assert time.monotonic() < deadline and proc.poll() is None, "no first epoch"
            found = list((storage / name).glob("trial_*/result.json"))
            if found and found[0].read_text().strip() and (faults / "rank0.pid").exists():
                result = found[0]
            time.sleep(0.5)
        first = json.loads(result.read_text().splitlines()[0])
        pid = int((faults / "rank0.pid").read_text())
        victim = next(n for n in c.worker_nodes if n.node_id == first["node_id"])
        if preempted:
            drain = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "drain-node", "--address",
                                    c.address, "--node-id", victim.node_id, "--reason",
                                    "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot instance reclaimed",
                                    "--deadline-remaining-seconds", "30"], check=False, capture_output=True, text=True, timeout=60)
            assert drain.returncode == 0, drain.stdout + drain.stderr
        c.remove_node(victim, allow_graceful=False)     # the node goes away with the trial on it
        deadline = time.monotonic() + 120
        while int((faults / "rank0.pid").read_text() or 0) == pid:   # the retried trial has started
            assert time.monotonic() < deadline and proc.poll() is None, "the trial was not retried"
            time.sleep(0.5)
        (faults / "hold").unlink()
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        c.add_node(num_cpus=2)                           # the module's cluster keeps three workers
        c.wait_for_nodes(timeout=90)                     # and the removed node is known dead before the next test
    assert proc.returncode == 0, out[-4000:]
    rows = [json.loads(line) for line in result.read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2, 3], rows       # epoch 1 not reported twice
    assert rows[1]["resumed_from_epoch"] == 1 and rows[1]["node_id"] != first["node_id"]
    return rows
