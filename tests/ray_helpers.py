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


def dashboard_json(url: str, route: str) -> dict:
    """GET a route of a Ray dashboard (host:port) with the token in ~/.ray/auth_token."""
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    req = urllib.request.Request(f"http://{url}{route}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())
