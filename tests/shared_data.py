"""The offline copy of the registered data sets that the suite reads:
`$ZOO_DATA` (tests/conftest.py and the Makefile point it at
`../shared/data`). A test that needs a data set skips, with the reason,
where the copy is absent."""

import os
from pathlib import Path

import pytest

from zoo.data import dataset_info

SHARED_DATA = Path(os.environ["ZOO_DATA"])


def has(name):
    """Whether `$ZOO_DATA/<name>` holds every file of the data set."""
    return all((SHARED_DATA / name / file.name).is_file() for file in dataset_info(name).files)


def needs(*names):
    """Skips a test where `$ZOO_DATA` lacks one of the data sets."""
    missing = [name for name in names if not has(name)]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not in ZOO_DATA={SHARED_DATA}")
