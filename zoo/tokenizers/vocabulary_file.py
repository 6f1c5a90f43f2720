"""Reads the JSON files the char and word vocabularies write."""

import json
from pathlib import Path

from zoo.errors import DataError


def read_vocabulary_file(path, key, default=None):
    """The list under `key` in the JSON object of `path` (`default` when
    given and the key is absent); a `DataError` naming the file otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: does not exist; expected a vocabulary file")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        return saved[key] if default is None else saved.get(key, default)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DataError(
            f"{path}: expected a JSON object with a {key!r} list"
        ) from None
