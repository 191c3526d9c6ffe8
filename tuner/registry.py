"""The service's storage: its settings (`service.yaml`, validated, saved beside the registry) and
the registry, one JSON record per submitted experiment.

Layout of the service storage (a folder the head can reach, or a bucket URI: s3://..., gs://...):

    service.json            the settings the dispatcher was started with (re-created from them)
    experiments/ID.json     one record per experiment, written atomically, with a format version
    experiments/ID.yaml     the experiment file as submitted (paths made absolute)

Records are JSON and only ever parsed as JSON, never unpickled.  A record that is corrupt, written
by another format version, or planted (a link, another user's file, a file writable by group or
others: the trust check of experiment folders) is refused with one line naming the file.  On a
bucket, who may write is the bucket's access control (its credentials), the same boundary as
an experiment's `storage_path` there; corrupt and other-version records are refused the same way.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainables.runtime import storage

FORMAT = 1
SETTINGS_FILE = "service.json"
RECORDS = "experiments"
PRIORITIES = ("high", "normal", "low")
STATES = ("queued", "running", "finished", "failed", "cancelled")
ENDED = ("finished", "failed", "cancelled")
Priority = Literal["high", "normal", "low"]
DEFAULT_WEIGHTS: dict[Priority, float] = {"high": 4.0, "normal": 2.0, "low": 1.0}


class RegistryError(RuntimeError):
    """A registry file that cannot be used, an unknown id, a refused request: one line."""


class ServiceSettings(BaseModel):
    """`service.yaml`: what `tuner service start --config` reads."""
    model_config = ConfigDict(extra="forbid")
    # A folder reachable from the head, or a bucket URI (s3://..., gs://...) the head can write: the
    # registry and the submitted files live there (a bucket outlives the head's disk).
    storage: str = "~/tuner-service"
    # Experiments that run at once; the rest wait in priority order, then by submission time.
    max_running: int = Field(default=2, ge=1)
    # A failed driver is started again (with `resume`) at most this many times.
    max_retries: int = Field(default=1, ge=0)
    # Shares of the cluster's GPUs (CPUs on a CPU cluster) by priority.
    weights: dict[Priority, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    # A queued experiment waiting longer than this goes ahead of the priority order (no starvation).
    starvation_s: float = Field(default=600.0, gt=0)
    # How often the dispatcher looks at its experiments and at the cluster.
    poll_s: float = Field(default=1.0, gt=0, le=60)

    @field_validator("weights")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in v.items() if not w > 0}
        if bad:
            raise ValueError(f"weights must be above 0, got {bad}")
        return v

    def weight(self, priority: str) -> float:
        return float({**DEFAULT_WEIGHTS, **self.weights}[priority])  # type: ignore[index]


class Record(BaseModel):
    """One experiment the service holds."""
    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = 1
    id: str
    name: str
    owner: str                          # the OS user who submitted it
    priority: Priority = "normal"
    state: Literal["queued", "running", "finished", "failed", "cancelled"] = "queued"
    submitted: float
    started: float | None = None
    ended: float | None = None
    file: str                           # the experiment file kept in the registry
    location: str                       # the experiment folder (or URI) the run writes
    need: dict[str, float]              # what its largest trial reserves
    max_slots: int = Field(ge=1)        # the most trials it runs at once on the whole cluster
    job: str | None = None              # the Ray job running its driver now: the lease
    attempts: int = 0                   # drivers started so far
    message: str | None = None          # why it failed, or who cancelled it
    trials_done: int | None = None      # at its end, from its summary.json
    best: float | None = None

    def row(self) -> dict[str, Any]:
        return self.model_dump()


def storage_root(settings: ServiceSettings) -> str:
    """The service storage: a bucket URI as written, a folder made absolute."""
    if storage.is_uri(settings.storage):
        return settings.storage
    return str(Path(settings.storage).expanduser().resolve())


def load_settings(path: str | Path) -> ServiceSettings:
    """`service.yaml`, checked: RegistryError naming the file and each bad field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise RegistryError(f"{p}: cannot read it ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{p}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return ServiceSettings(**data)
    except ValidationError as e:
        raise RegistryError(f"{p}: " + "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (got {err.get('input')!r})" for err in e.errors())
            + "; see docs/service.md for the settings") from None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically, private to this user (0600), so that the trust check accepts it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _untrusted(path: Path) -> str | None:
    """The file and the folders holding it, judged by the trust check of experiment folders."""
    from .experiment import untrusted_path
    for p in (path.parent, path):
        why = untrusted_path(p)
        if why:
            return why
    return None


def read_json(path: Path | str, what: str) -> dict[str, Any]:
    """A registry file's contents after the trust check (a folder's; a bucket's is its access
    control); RegistryError naming the file, FileNotFoundError when there is none."""
    if not storage.is_uri(path):   # (a missing object raises FileNotFoundError too)
        path = Path(path)
        why = _untrusted(path)
        if why:
            raise RegistryError(f"{path}: refused ({why}); a registry file someone else could have written is "
                                "never read: check who changed it, then `chmod go-w` it if it is yours")
    try:
        data = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise RegistryError(f"{path}: corrupt {what} ({e}); move it aside to go on without it") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: corrupt {what} (a JSON {type(data).__name__}, not an object)")
    if data.get("format") != FORMAT:
        raise RegistryError(f"{path}: {what} of format {data.get('format')!r}, this version reads format {FORMAT}: "
                            "written by another version of tuner; use that version for it")
    return data


class Registry:
    """The records in `root/experiments`; root a folder or a bucket URI."""

    def __init__(self, root: str | Path):
        self.remote = storage.is_uri(root)
        self.root: Path | str = str(root) if self.remote else Path(root)
        self.dir: Path | str = self._at(RECORDS)
        # What each record file held (or why it was refused) at its stamp of the last listing, so
        # that a pass over the registry is one listing plus a read of each file that changed.
        self._seen: dict[str, tuple[tuple[Any, ...], Record | str]] = {}

    def _at(self, *parts: str) -> Path | str:
        return storage.join(self.root, *parts) if self.remote else Path(self.root, *parts)

    def _write(self, path: Path | str, data: dict[str, Any]) -> None:
        if self.remote:   # one PUT: an object is replaced whole, never seen half-written
            storage.write_bytes(path, json.dumps(data, indent=1).encode())
        else:
            write_json(Path(path), data)

    # settings saved beside the registry
    def save_settings(self, s: ServiceSettings) -> None:
        self._write(self._at(SETTINGS_FILE), {"format": FORMAT, **s.model_dump()})

    def saved_settings(self) -> ServiceSettings:
        path = self._at(SETTINGS_FILE)
        data = read_json(path, "service settings")
        data.pop("format")
        try:
            return ServiceSettings(**data)
        except ValidationError as e:
            raise RegistryError(f"{path}: corrupt service settings ({e.errors()[0]['msg']})") from None

    # records
    def path(self, exp_id: str) -> Path | str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}", exp_id):
            raise RegistryError(f"{exp_id!r} is not an experiment id (`tuner queue` lists them)")
        return self._at(RECORDS, f"{exp_id}.json")

    def new_id(self, name: str) -> str:
        """A fresh id.  In a folder its record file is created exclusively (ids never repeat, even
        between processes); on a bucket, which has no exclusive create, an id already there is
        skipped (the dispatcher, the one writer of records, makes them one at a time)."""
        if not self.remote:
            Path(self.dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:40] or "experiment"
        while True:
            exp_id = f"{slug}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            if self.remote:
                if not storage.exists(self.path(exp_id)):
                    return exp_id
                continue
            try:
                fd = os.open(self.path(exp_id), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                continue
            os.close(fd)
            return exp_id

    def save(self, rec: Record) -> None:
        self._write(self.path(rec.id), rec.model_dump())

    def save_file(self, exp_id: str, text: str) -> str:
        """The experiment file as submitted, kept beside its record; where it is."""
        self.path(exp_id)   # the id checked
        where = self._at(RECORDS, f"{exp_id}.yaml")
        if self.remote:
            storage.write_bytes(where, text.encode())
        else:
            Path(where).write_text(text)
            Path(where).chmod(0o600)
        return str(where)

    def local_file(self, rec: Record, folder: Path) -> str:
        """A file `tuner run` can read on this machine: the kept one in a folder registry; from a
        bucket, copied into `folder` (private to this user) first."""
        if not storage.is_uri(rec.file):
            return rec.file
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        local = folder / f"{rec.id}.yaml"
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(storage.read_bytes(rec.file))
        return str(local)

    def get(self, exp_id: str) -> Record:
        path = self.path(exp_id)
        try:
            data = read_json(path, "experiment record")
        except FileNotFoundError:
            raise RegistryError(f"no experiment {exp_id!r} in {self.dir} (`tuner queue` lists them)") from None
        try:
            return Record(**data)
        except ValidationError as e:
            err = e.errors()[0]
            raise RegistryError(f"{path}: corrupt experiment record ({'.'.join(map(str, err['loc']))}: "
                                f"{err['msg']}); move it aside to go on without it") from None

    def _listing(self) -> dict[str, tuple[Any, ...]]:
        """{id: stamp} of the record files now; a stamp changes whenever what the record says or
        what the trust check judges could have changed (on a folder: the file's contents, times,
        inode, mode and owner, and the folder's mode and owner; on a bucket: time and size)."""
        if self.remote:
            return {n[:-5]: st for n, st in storage.files(self.dir).items() if n.endswith(".json")}
        d = Path(self.dir)
        try:
            top = os.lstat(d)
        except FileNotFoundError:
            return {}
        out = {}
        for p in d.glob("*.json"):
            try:
                st = os.lstat(p)
            except FileNotFoundError:   # removed meanwhile
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:   # an id being created
                continue
            out[p.stem] = (st.st_mtime_ns, st.st_size, st.st_ctime_ns, st.st_ino, st.st_mode, st.st_uid,
                           top.st_ino, top.st_mode, top.st_uid)
        return out

    def all(self) -> tuple[list[Record], list[str]]:
        """(every readable record, oldest first; one line per file refused).  A record is read
        (and judged) again only when its stamp changed, or when it changed in the last 2 s (a
        bucket's times are to the second), so a pass over a registry of many finished
        experiments reads none of them."""
        listed = self._listing()
        self._seen = {k: v for k, v in self._seen.items() if k in listed}
        recent = (time.time() - 2) * 1e9
        for exp_id, stamp in listed.items():
            if stamp[0] > recent or exp_id not in self._seen or self._seen[exp_id][0] != stamp:
                try:
                    self._seen[exp_id] = (stamp, self.get(exp_id))
                except RegistryError as e:
                    self._seen[exp_id] = (stamp, str(e))
        out = [got for _, got in self._seen.values() if isinstance(got, Record)]
        bad = sorted(got for _, got in self._seen.values() if isinstance(got, str))
        return sorted(out, key=lambda r: r.submitted), bad
