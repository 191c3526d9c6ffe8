"""A warm process that forks the training processes of the trials on its machine.

A trial whose reservation differs from the one before it gets a new Tune actor, a new
process: it would import torch (about 2 s on two cores) and, at its first optimizer step,
`torch._dynamo` (another 1.8 s) before its first epoch; each rank of a DDP trial started by the
trial pays the same.  `tuner run` starts this server once, beside its Ray driver: it imports
those modules once, listens on a Unix socket in a private folder and forks one child per
request.  A child takes on the requesting trial's environment, working folder and output,
then runs as a rank of trainables/runtime/ranks.py over the socket the trial handed it; it ends when
the trial's process ends (a watch on that pid), since its parent is this server, not the trial.

Only torch's own modules are imported here: the project's modules read settings from the
environment as they load (Triton's interpreter switch, for one), so a child imports them after
it has taken the trial's environment.  Nothing here touches a GPU or starts a thread pool, so a
fork is as safe as a DataLoader worker's.  A trial that cannot reach the server (another node,
another Python, no server) starts its processes as before.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "TUNER_FORK_SERVER"      # the server's socket, for the trials (set in the job's environment)
PRELOAD = ("torch", "torch._dynamo", "torch.distributed")
CONNECT_TIMEOUT_S = 60.0       # a request waits this long for a server still importing torch
BIND_TIMEOUT_S = 10.0          # start() waits this long for the server's socket
_LEN = struct.Struct("!I")
_INT = struct.Struct("!i")


_server: dict = {}


def start() -> str | None:
    """Start the server (it imports in the background) and point this process's environment
    at it; stopped when this process exits.  Its socket path, or None when it cannot start."""
    stop()
    folder = tempfile.mkdtemp(prefix="tuner-fork-")
    path = os.path.join(folder, "socket")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "trainables.runtime.forkserver", path, str(os.getpid())],
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    if not _server:
        atexit.register(stop)
    _server.update(proc=proc, folder=folder)
    deadline = time.monotonic() + BIND_TIMEOUT_S
    while not os.path.exists(path):   # it binds before it imports: a matter of a Python start
        if proc.poll() is not None or time.monotonic() > deadline:
            stop()
            return None
        time.sleep(0.01)
    os.environ[ENV] = path
    return path


def stop() -> None:
    """End the server this process started, if any (its children go on until their trials end)."""
    proc, folder = _server.pop("proc", None), _server.pop("folder", None)
    if proc is None:
        return
    if os.environ.get(ENV, "").startswith(folder):
        del os.environ[ENV]
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


class Forked:
    """A child of the server, driven like a subprocess.Popen: its exit status comes back over
    the request's connection, which the server answers when it reaps the child."""

    def __init__(self, sock: socket.socket, pid: int):
        self.sock, self.pid, self.returncode = sock, pid, None

    def _read_status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self.sock is not None:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return None
            data = _recv_exact(self.sock, _INT.size)
            self.sock.close()
            self.sock = None
            if data:
                self.returncode = _INT.unpack(data)[0]
                return self.returncode
        # The server went away before the child ended: follow the pid itself (its exit
        # status is lost with the server, so it counts as killed).
        deadline = None if timeout is None else time.monotonic() + timeout
        while _running(self.pid):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        self.returncode = -signal.SIGKILL
        return self.returncode

    def poll(self) -> int | None:
        return self._read_status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        return code

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


def available() -> bool:
    """A server was started for this machine's trials (its socket is here to connect to)."""
    path = os.environ.get(ENV)
    return bool(path) and os.path.exists(path)


def spawn(fd: int) -> Forked | None:
    """Ask this machine's server for a rank process that serves `fd` (one end of the trial's
    socket pair), with this process's environment, folder and output.  None when there is no
    usable server: the caller starts the process itself."""
    if not available():
        return None
    path = os.environ[ENV]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(path)
        hello = _recv_msg(sock)   # sent once the server has imported torch
        if hello is None or hello["python"] != os.path.realpath(sys.executable) or hello["uid"] != os.getuid():
            sock.close()
            return None
        socket.send_fds(sock, [b"R"], [fd, 1, 2])   # this process's output, as a child of it would have
        _send_msg(sock, {"env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(), "path": list(sys.path)})
        data = _recv_exact(sock, _INT.size)
        if not data:
            sock.close()
            return None
        sock.settimeout(None)
        return Forked(sock, _INT.unpack(data)[0])
    except OSError:
        sock.close()
        return None


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _send_msg(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv_msg(sock: socket.socket):
    head = _recv_exact(sock, _LEN.size)
    if head is None:
        return None
    body = _recv_exact(sock, _LEN.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _watch(pid: int) -> None:
    """End this process as soon as `pid` (the trial that asked for it) has ended."""
    def run() -> None:
        try:
            fd = os.pidfd_open(pid)
            select.select([fd], [], [])
        except (AttributeError, OSError):   # no pidfd (old kernel): look every 0.2 s
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
        os._exit(1)
    threading.Thread(target=run, name="tuner-trial-watch", daemon=True).start()


def _child(inherited: list, fds: list[int], request: dict) -> None:
    """In the forked child: become the trial's process, then run as its rank."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for f in inherited:   # the server's socket and pipe, its other children's connections
            f.close() if hasattr(f, "close") else os.close(f)
        rank_fd, out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None   # TMPDIR as the trial has it, not as the server found it
        os.chdir(request["cwd"])
        sys.path[:] = request["path"]
        _watch(request["pid"])
        from trainables.runtime.ranks import serve_rank
    except BaseException:  # noqa: BLE001 - the trial sees the socket close and reports the exit code
        os._exit(1)
    serve_rank(rank_fd)


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            conn.close()


def _serve(path: str, parent: int) -> None:
    from trainables.runtime.ranks import die_with

    def end(*_) -> None:   # stopped, or its driver ended (killed too): no folder left behind
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        os._exit(0)
    signal.signal(signal.SIGTERM, end)
    die_with(parent, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the driver handles Ctrl-C; this ends with it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)           # bound first: a trial that comes early waits for the import
    listener.listen(64)
    import importlib
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a child imports (and fails) for itself
            print(f"tuner fork server: could not preload {name}: {e}", file=sys.stderr, flush=True)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():   # a fork could not use the GPU: serve no one
        print("tuner fork server: CUDA was initialised while preloading; trials start their own processes",
              file=sys.stderr, flush=True)
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    hello = {"python": os.path.realpath(sys.executable), "uid": os.getuid()}
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 512)
        _reap(children)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        try:
            conn.settimeout(30)
            _send_msg(conn, hello)
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            request = _recv_msg(conn)
            if request is None or len(fds) != 3:
                raise OSError("incomplete request")
        except (OSError, pickle.UnpicklingError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            _child([listener, conn, wake_r, wake_w, *children.values()], fds, request)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(_INT.pack(pid))
            children[pid] = conn
        except OSError:
            conn.close()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
