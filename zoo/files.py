"""Atomic file writes: write beside the target, then rename over it.

A run killed while saving leaves either the old file or the new one in
place, never a truncated one: `os.replace` is atomic on POSIX and Windows
when both paths are on the same file system, which they are here (the
temporary file sits in the target's folder).

    with atomic_path("runs/gpt/model.keras") as tmp:
        model.save(tmp)  # tmp ends in ".keras" too, as Keras requires

This module needs only the standard library, so every part of the zoo
(`data`, `training`, the models) may use it.
"""

import contextlib
import os
import uuid
from pathlib import Path

TEMPORARY = ".{stem}.tmp-{tag}{suffixes}"  # hidden, beside the target


def _fsync(path):
    """Flushes a written file to disk, so the rename commits its contents."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path in `path`'s folder with the same suffixes;
    renames it to `path` when the block succeeds and removes it when the
    block raises.

    Args:
        path: str or `pathlib.Path`, the file to write.

    Yields:
        A `pathlib.Path` to write to instead of `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffixes = "".join(path.suffixes)  # ".weights.h5" stays whole for Keras
    stem = path.name[: len(path.name) - len(suffixes)] if suffixes else path.name
    tmp = path.with_name(TEMPORARY.format(stem=stem, tag=uuid.uuid4().hex[:8], suffixes=suffixes))
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def remove_stale_temporaries(folder):
    """Deletes the temporary files that saves killed half-way left in
    `folder` (they never replaced anything, so they hold nothing of value)."""
    pattern = TEMPORARY.format(stem="*", tag="*", suffixes="")
    for tmp in Path(folder).rglob(pattern):
        if tmp.is_file():
            tmp.unlink()


def zoo_home():
    """The zoo's own cache folder: `$ZOO_HOME`, else `~/.cache/zoo`
    (data sets, vocabularies, compiled programs)."""
    return Path(os.environ.get("ZOO_HOME") or Path.home() / ".cache" / "zoo")
