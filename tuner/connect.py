"""Connecting to Ray: join a cluster, or start an embedded local Ray with token auth and its dashboard on 127.0.0.1."""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from trainables import settings
from tuner.cluster import ClusterError, largest_need
from tuner.schema import Experiment


def connect(address: str | None, exp: Experiment, echo: Callable[[str], None] = print,
            allow_no_auth: bool = False, verbose: bool = False, env: dict[str, str] | None = None) -> str | None:
    """Join `address` / RAY_ADDRESS, or start an embedded local Ray with its dashboard on
    127.0.0.1 (token authentication stays on; refused when the environment turns it off,
    unless the user says so).  The session folder of a Ray started here, else None."""
    import ray

    from .console import quiet_logs
    quiet_logs(verbose)
    os.environ.update(settings.driver_env(verbose))   # read by Tune in this process, when the run starts
    if ray.is_initialized():
        return None
    conf = settings.read()
    address = address or conf.ray_address
    if not address and conf.ray_auth_disabled and not allow_no_auth:
        raise ClusterError("RAY_AUTH_MODE=disabled in the environment would start a local Ray whose dashboard, "
                           "jobs API and ports answer anyone who can reach them; unset it (token authentication "
                           "is the default) or pass --allow-no-auth to accept that")
    log_level = logging.INFO if verbose else logging.WARNING
    runtime_env = {"env_vars": {**settings.trial_env(local_ray=not address), **(env or {})}}
    if address:
        try:
            ctx = ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=log_level)
        except Exception as e:  # noqa: BLE001 - whatever ray.init raises: one line naming the address
            raise ClusterError(f"cannot connect to Ray at {address}: {e}") from None
        echo(f"connected to Ray at {address}")
    else:
        need = largest_need(exp)
        # Logical CPUs: at least one trial must fit, even on a 2-core laptop.
        cpus = max(os.cpu_count() or 1, math.ceil(need["CPU"]))
        ctx = ray.init(address="local", num_cpus=cpus, include_dashboard=True, dashboard_host="127.0.0.1",
                       runtime_env=runtime_env, log_to_driver=False, logging_level=log_level)
        echo(f"started a local Ray ({cpus} logical CPUs)")
    url = getattr(ctx, "dashboard_url", None)
    if url:
        token = Path.home() / ".ray" / "auth_token"
        hint = f" (token: {token})" if token.exists() else ""
        echo(f"Ray dashboard: http://{url}{hint}")
    return None if address else ctx.address_info["session_dir"]

