"""What the applications open by name: a training run's folder, a `.keras`
file, or a checkpoint folder or handle.

A run folder is what a recipe writes (`--output`): `run.json` (the recipe,
its arguments and figures) beside `model.keras` (the trained task, carrying
its tokenizer). `zoo serve`, `zoo explore` and the command line open a
model through `open_target`, so each reads the same names the same way.
"""

import json
from pathlib import Path

MODEL = "model.keras"
RUN = "run.json"


def is_run_folder(path):
    """Whether `path` is a finished zoo run folder (run.json and model.keras)."""
    path = Path(path)
    return (path / RUN).is_file() and (path / MODEL).is_file()


def load_model(folder):
    """The run's model.keras, for use and evaluation (no optimizer state)."""
    from zoo.saving import load

    return load(Path(getattr(folder, "path", folder)) / MODEL, compile=False)


def read_run(path):
    """A run folder's run.json, or a `DataError` saying what is missing."""
    from zoo.errors import DataError

    path = Path(path)
    if not (path / RUN).is_file():
        raise DataError(f"{path}: no {RUN}; expected a run folder written by a recipe (`zoo train NAME --output DIR`)")
    record = json.loads((path / RUN).read_text(encoding="utf-8"))
    if not (path / MODEL).is_file():
        state = "finished" if record.get("finished") else "unfinished"
        raise DataError(f"{path}: the {state} run has no {MODEL}; expected a run that trained at least one epoch")
    return record


def open_target(target):
    """The model of a run folder, a `.keras` file, or a checkpoint folder or handle.

    Args:
        target: a run folder holding `model.keras` (as the recipes write),
            a `.keras` file, or a checkpoint that `zoo.from_pretrained`
            reads: a folder or a handle (`hf://ORG/NAME[@REVISION]`, a
            keras-hub preset name).
    """
    from zoo.checkpoints import from_pretrained, is_handle
    from zoo.saving import load

    if is_handle(target):  # before Path(), which folds the `//` of `hf://`
        return from_pretrained(target)
    path = Path(target)
    if path.is_dir() and (path / RUN).is_file():
        read_run(path)  # says what is missing from a run folder
        return load_model(path)
    if path.is_dir() and (path / MODEL).is_file():
        return load(path / MODEL, compile=False)
    if path.suffix == ".keras":
        if not path.is_file():
            raise ValueError(f"{path}: no such file; expected a .keras file written by zoo.save")
        return load(path, compile=False)
    if path.is_dir():
        return from_pretrained(path)
    raise ValueError(
        f"{path}: not found; expected a run folder (holding model.keras), a .keras file, a checkpoint folder "
        "or a handle (hf://ORG/NAME)"
    )
