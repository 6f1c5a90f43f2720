"""`from_pretrained` and `export`: real checkpoints in and out.

The code lives in `zoo.checkpoints` (one driver per format, one file per
family); these are its public names, where `zoo.from_pretrained` and
`zoo.export` have always found them.
"""

from zoo.checkpoints import (
    FORMATS,
    CheckpointError,
    checkpoint_folder,
    checkpoint_format,
    export,
    from_pretrained,
    is_checkpoint_folder,
    is_handle,
)

__all__ = [
    "FORMATS",
    "CheckpointError",
    "checkpoint_folder",
    "checkpoint_format",
    "export",
    "from_pretrained",
    "is_checkpoint_folder",
    "is_handle",
]
