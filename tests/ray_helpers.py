"""Small helpers the Ray integration tests share: free ports and the dashboard's HTTP API."""
from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """n distinct ports free on 127.0.0.1 now (all held open while choosing, so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def node_ports() -> list[str]:
    """`ray start` flags that give a node's raylet and agents ports of their own: Ray's defaults
    (the agent's 52365 among them) can still be held by a node of an earlier test that is shutting
    down (seen in CI: an extra node's `ray start` exited 1 and never joined)."""
    nm, om, metrics, agent_http, agent_grpc, renv = free_ports(6)
    return [f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--metrics-export-port={metrics}",
            f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={renv}"]


def dashboard_json(url: str, route: str) -> dict:
    """GET a route of a Ray dashboard (host:port) with the token in ~/.ray/auth_token."""
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    req = urllib.request.Request(f"http://{url}{route}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def interrupt_when(cmd: list[str], ready, wait_s: float = 240, **popen) -> str:
    """Run `cmd` (a `tuner run`), press Ctrl-C once ready() is true; its output.  Fails if it
    ends first, if ready() does not come within wait_s, or if it does not exit 130."""
    import signal
    import subprocess
    import time
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    try:
        deadline = time.time() + wait_s
        while not ready():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:] if proc.poll() else ""
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out[-3000:]
    return out
