"""Exclusive, atomic rewrites of one file, safe against concurrent editors.

`locked(path)` holds an flock on a sidecar file (`.<name>.dtgen-lock` beside the spec):
the spec itself cannot carry the lock because each write replaces its inode. Under the
lock an editor re-reads the file, so two concurrent edits serialise instead of one
silently undoing the other. `write_atomic` writes a temporary file in the same folder,
fsyncs it and renames it over the target, so a reader sees the old or the new file,
never half of one. The sidecar is left in place on purpose: deleting a lock file while
another process waits on it would let two holders in. POSIX only (fcntl).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.dtgen-lock")


@contextlib.contextmanager
def locked(path: Path):
    """Hold the exclusive edit lock of `path` (blocks until other editors finish)."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path`'s content with `data` in one rename; keeps its permission bits."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
