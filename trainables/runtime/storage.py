"""A storage path is a local folder or a cloud URI (s3://bucket/runs, gs://bucket/runs).

A URI goes through pyarrow's filesystem layer, the one Ray's own storage uses: whatever Ray
can write there, the tuner's own files (experiment YAML, summary, searcher journal, preflight
markers) can too, with the same credentials.  Its query (`?endpoint_override=...&region=...`)
stays at the end when a path is joined onto it, as pyarrow and Ray expect.  pyarrow is
imported for URIs only: the training side runs without it on local folders.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def is_uri(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def _split(uri: str) -> tuple[str, str]:
    head, sep, query = uri.partition("?")
    return head.rstrip("/"), sep + query


def join(base: str | os.PathLike, *parts: str) -> str:
    """`base/part/...`: a local path, or a URI with its query kept at the end."""
    if not is_uri(base):
        return str(Path(base, *parts))
    head, query = _split(str(base))
    return "/".join([head, *parts]) + query


def parent_and_name(uri: str) -> tuple[str, str]:
    """('s3://b/runs?q', 'exp') for 's3://b/runs/exp?q'."""
    head, query = _split(uri)
    parent, _, name = head.rpartition("/")
    return parent + query, name


def local_copy(uri: str) -> Path:
    """The folder on this machine that mirrors `uri` (query left out): the driver's own files
    of a run on cloud storage, and what `status`/`export`/`report` download.  Under
    TUNER_CACHE, default ~/.cache/tuner."""
    head, _ = _split(uri)
    scheme, _, rest = head.partition("://")
    from trainables import settings
    root = settings.read().cache
    return root / "storage" / scheme / rest


def filesystem(uri: str):
    """(pyarrow filesystem, path on it) for a URI."""
    from pyarrow.fs import FileSystem
    return FileSystem.from_uri(uri)


def read_bytes(path: str | os.PathLike) -> bytes:
    if not is_uri(path):
        return Path(path).read_bytes()
    fs, p = filesystem(str(path))
    with fs.open_input_stream(p) as f:
        return f.read()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    if not is_uri(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return
    fs, p = filesystem(str(path))
    fs.create_dir(p.rpartition("/")[0], recursive=True)
    with fs.open_output_stream(p) as f:
        f.write(data)


def exists(path: str | os.PathLike) -> bool:
    if not is_uri(path):
        return Path(path).exists()
    from pyarrow.fs import FileType
    fs, p = filesystem(str(path))
    return fs.get_file_info(p).type != FileType.NotFound


def files(folder: str | os.PathLike) -> dict[str, tuple[int, int]]:
    """{name: (modification time in ns, size)} of the files directly in a folder or under a URI
    prefix (one listing call on a bucket); {} if there is none."""
    if not is_uri(folder):
        if not Path(folder).is_dir():
            return {}
        return {p.name: (st.st_mtime_ns, st.st_size) for p in Path(folder).iterdir()
                if p.is_file() and (st := p.stat())}
    from pyarrow.fs import FileSelector, FileType
    fs, p = filesystem(str(folder))
    infos = fs.get_file_info(FileSelector(p.rstrip("/"), allow_not_found=True))
    return {i.base_name: (i.mtime_ns or 0, i.size or 0) for i in infos if i.type == FileType.File}


def names(folder: str | os.PathLike) -> list[str]:
    """The names of the files directly in a folder or under a URI prefix; [] if there is none."""
    return sorted(files(folder))


def remove(path: str | os.PathLike) -> None:
    """Delete a file; nothing if it is not there."""
    if not is_uri(path):
        Path(path).unlink(missing_ok=True)
        return
    fs, p = filesystem(str(path))
    try:
        fs.delete_file(p)
    except FileNotFoundError:
        pass


class UnsafeKey(ValueError):
    """An object key that would put a downloaded file outside the folder it is copied into."""


def inside(dest: Path, rel: str, key: str = "") -> Path:
    """dest/rel, made sure to stay in dest: no `..`, `.` or empty part, no absolute path, and no
    symbolic link on the way (one planted there could point anywhere).  UnsafeKey otherwise."""
    parts = rel.split("/")
    why = ("it is absolute" if rel.startswith("/") else
           "it has a '..', '.' or empty part" if not rel or any(p in ("", ".", "..") for p in parts) else None)
    at = Path(dest)
    for part in parts if why is None else ():
        at = at / part
        if at.is_symlink():
            why = f"{at} on its way is a symbolic link"
            break
    if why:
        raise UnsafeKey(f"refused to copy {key or rel!r} into {dest}: {why}, so the file would land outside "
                        f"that folder; remove the object from the bucket (nothing was written for it)")
    return Path(dest, *parts)


def download(uri: str, dest: Path, keep: Callable[[str], bool] = lambda rel: True) -> list[str]:
    """Copy the files under `uri` whose relative path `keep` accepts into `dest` (made, files
    there overwritten); the relative paths copied.  An object whose key would leave `dest`
    is refused (UnsafeKey) before anything is written for it."""
    from pyarrow.fs import FileSelector, FileType
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    infos = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    copied = []
    for info in infos:
        if info.type != FileType.File:
            continue
        if not info.path.startswith(root + "/"):
            raise UnsafeKey(f"refused to copy {info.path!r}: it is not under {root!r}")
        rel = info.path[len(root) + 1:]
        if not keep(rel):
            continue
        target = inside(dest, rel, info.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with fs.open_input_stream(info.path) as src, os.fdopen(fd, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        copied.append(rel)
    return copied


def first_line(e: Exception) -> str:
    """An error's first line (pyarrow's carry the service's whole answer), or its type."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def writable_problem(name: str, uri: str) -> str | None:
    """Why the URI `name` (a setting) cannot be written and read back here, or None: judged
    by a marker written, read back and deleted."""
    import uuid
    marker = join(uri, f".tuner-preflight-{uuid.uuid4().hex}")
    try:
        write_bytes(marker, b"ok")
        ok = read_bytes(marker) == b"ok"
        remove(marker)
    except Exception as e:  # noqa: BLE001 - pyarrow raises OSError subclasses and ArrowInvalid for bad URIs
        return (f"{name}: {uri!r} cannot be written from here ({first_line(e)}); check the bucket name, the credentials "
                "(AWS_* / GOOGLE_APPLICATION_CREDENTIALS, or the node's instance profile / service account) "
                "and the endpoint")
    if not ok:
        return f"{name}: {uri!r}: a file written there did not read back; check the storage service"
    return None
