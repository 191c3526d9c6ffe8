"""Feasibility on an autoscaling cluster: a GPU trial on a cluster that has no GPU node yet,
but whose autoscaler can start one (Ray's fake multi-node provider, started here in its own
process group and temp dir), waits for it instead of being refused."""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml
from ray_helpers import free_ports

pytestmark = pytest.mark.integration
AUTH: dict[str, str] = {}   # the head's token, for every client of it


@pytest.fixture(scope="module")
def autoscaling_head(tmp_path_factory):
    import ray.util
    tmp = tmp_path_factory.mktemp("autoscale")
    port, dashboard_port, client_port = free_ports(3)
    address = f"{ray.util.get_node_ip_address()}:{port}"
    cfg = tmp / "autoscaler.yaml"
    cfg.write_text(yaml.safe_dump({
        "cluster_name": "fake", "max_workers": 1, "upscaling_speed": 1, "idle_timeout_minutes": 1,
        "provider": {"type": "fake_multinode", "gcs_address": address, "disable_node_updaters": True,
                     "disable_launch_config_check": True},
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "gpu.small": {"resources": {"CPU": 1, "GPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 1},
        },
        "head_node_type": "ray.head.default",
        # The rest of what `ray up` writes into the config the autoscaler reads.
        "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }))
    temp_dir = Path(tempfile.mkdtemp(prefix="tuner-as-", dir="/tmp"))   # short: socket paths
    token = tmp / "token"
    token.write_text(secrets.token_hex(32))
    AUTH.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    env = {**os.environ, **AUTH, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=0",
         f"--autoscaling-config={cfg}", f"--temp-dir={temp_dir}", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard_port}", f"--ray-client-server-port={client_port}"],
        env=env, start_new_session=True, stdout=(tmp / "head.log").open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not _nodes(address):
            assert time.monotonic() < deadline and head.poll() is None, (tmp / "head.log").read_text()[-3000:]
            time.sleep(1)
        yield address, cfg, tmp
    finally:
        members = [p for p in psutil.process_iter(["cmdline"]) if _in_group(p, head.pid)
                   or any(str(temp_dir) in part for part in (p.info["cmdline"] or []))]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                pass
            for p in members:
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            psutil.wait_procs(members, timeout=3 if sig == signal.SIGTERM else 15)   # agents ignore SIGTERM
        head.wait(timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _in_group(p: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(p.pid) == pgid
    except OSError:
        return False


def _nodes(address: str) -> list[dict]:
    code = (f"import ray, json; ray.init(address={address!r}, log_to_driver=False, logging_level='ERROR');"
            "print(json.dumps([{'id': n['NodeID'], 'res': n['Resources']} for n in ray.nodes() if n['Alive']]))")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                       env={**os.environ, **AUTH})
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else []


def _spec(tmp: Path, name: str, gpus: int) -> Path:
    spec = tmp / f"{name}.yaml"
    spec.write_text(f"""
name: {name}
storage_path: {tmp / 'runs'}
budget: {{num_samples: 1, max_epochs: 1, grace_epochs: 1}}
resources: {{workers: 1, cpus_per_worker: 1, gpus_per_worker: {gpus}}}
train: {{dataset: digits, device: cpu, cache_dir: {tmp / 'cache'}, model: convnet, width: 0.25, max_steps_per_epoch: 1}}
""")
    return spec


def _run(spec: Path, address: str, cfg: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **AUTH, "TUNER_AUTOSCALER_CONFIG": str(cfg)}
    return subprocess.run([sys.executable, "-m", "tuner", "run", str(spec), "--address", address],
                          check=False, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.timeout(300)
def test_a_gpu_trial_waits_for_the_autoscaler_instead_of_being_refused(autoscaling_head):
    address, cfg, tmp = autoscaling_head
    assert not any(n["res"].get("GPU") for n in _nodes(address))         # no GPU node yet
    r = _run(_spec(tmp, "grow", 1), address, cfg)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "asked its autoscaler for 1 (node type gpu.small); trials wait until nodes join" in out, out[-3000:]
    (result,) = (tmp / "runs" / "grow").glob("trial_*/result.json")
    row = json.loads(result.read_text().splitlines()[-1])
    gpu_nodes = {n["id"] for n in _nodes(address) if n["res"].get("GPU")}
    assert row["status"] == "ok" and row["node_id"] in gpu_nodes          # on the node the autoscaler added


@pytest.mark.timeout(120)
def test_a_trial_no_node_type_can_hold_is_refused(autoscaling_head):
    address, cfg, tmp = autoscaling_head
    r = _run(_spec(tmp, "toobig", 2), address, cfg)
    assert r.returncode == 2 and "one trial needs 2 GPU" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert not (tmp / "runs" / "toobig" / "tuner-experiment.yaml").exists()
