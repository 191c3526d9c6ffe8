"""`ray job submit --working-dir . -- python -m tuner run FILE` against a Ray head started by this
test (its own ports, temp dir and token), from a fresh copy of the project: the results are
where `run` said, outside Ray's unpacked copy, and `status` reads them after the head is gone."""
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from ray_helpers import free_ports

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _fresh_copy(dest: Path) -> None:
    """The project's files as git tracks them (and new ones not ignored), nothing else."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _end_group(proc: subprocess.Popen, temp_dir: Path) -> None:
    """End the head's process group, then anything else that names its temp dir."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=5 if sig == signal.SIGTERM else 20)
            break
        except subprocess.TimeoutExpired:
            continue
    for p in psutil.process_iter(["cmdline"]):
        if any(str(temp_dir) in part for part in (p.info["cmdline"] or [])):
            p.kill()


@pytest.mark.timeout(240)
def test_a_ray_job_keeps_its_results_after_the_head_is_gone(tmp_path):
    ray_bin = str(Path(sys.executable).parent / "ray")
    # Short: Ray's socket paths under it must stay within 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="tuner-job-", dir="/tmp"))
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_ADDRESS", None)
    gcs, dash, client, nm, om, metrics, agent_http, agent_grpc, renv = free_ports(9)
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={gcs}", f"--dashboard-port={dash}",
         "--dashboard-host=127.0.0.1", "--include-dashboard=true", f"--ray-client-server-port={client}",
         f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--metrics-export-port={metrics}",
         f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--runtime-env-agent-port={renv}", "--min-worker-port=0", "--max-worker-port=0",
         "--num-cpus=2", f"--temp-dir={temp_dir}"],
        env=env, start_new_session=True, stdout=(tmp_path / "head.log").open("w"), stderr=subprocess.STDOUT)
    work = tmp_path / "copy"
    _fresh_copy(work)
    home = tmp_path / "home"
    try:
        url = f"http://127.0.0.1:{dash}"
        deadline = time.monotonic() + 90
        while True:
            try:
                req = urllib.request.Request(f"{url}/api/version", headers={"Authorization": f"Bearer {token.read_text()}"})
                urllib.request.urlopen(req, timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline and head.poll() is None, \
                    "the Ray head did not come up:\n" + (tmp_path / "head.log").read_text()[-3000:]
                time.sleep(1)
        job = subprocess.run(  # noqa: PLW1510 - its return code is asserted below
            [ray_bin, "job", "submit", "--address", url, "--working-dir", ".",
             "--runtime-env-json", f'{{"env_vars": {{"TUNER_HOME": "{home}"}}}}', "--",
             sys.executable, "-m", "tuner", "run", "search_spaces/quickstart.yaml", "--set", "budget.num_samples=2",
             "--set", "budget.max_epochs=2", "--set", "train.max_steps_per_epoch=2"],
            cwd=work, env=env, capture_output=True, text=True, timeout=180)
        out = job.stdout + job.stderr
        assert job.returncode == 0, out[-4000:]
    finally:
        _end_group(head, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    said = re.search(r"results in (\S+)$", out, re.MULTILINE)
    assert said, out[-3000:]
    exp_dir = Path(said[1])
    assert exp_dir == home / "runs" / "quickstart"              # TUNER_HOME, not Ray's unpacked copy
    assert "_ray_pkg_" not in out.split("results in", 1)[1].split("\n", 1)[0]
    assert (exp_dir / "summary.json").is_file() and (exp_dir / "tuner-experiment.yaml").is_file()
    assert (home / ".cache" / "tuner" / "digits.h5").is_file()   # the relative cache_dir too
    # The head and its session are gone; the printed command still works.
    assert not any(str(temp_dir) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
    status = subprocess.run([sys.executable, "-m", "tuner", "status", str(exp_dir)], check=False, capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert status.returncode == 0 and "quickstart: 2 trials" in status.stdout, status.stdout + status.stderr
