"""Saving and loading models and weights: atomic writes, safe loading and
clear errors.

    zoo.save(model, "runs/gpt/model.keras")   # write, then rename
    model = zoo.load("runs/gpt/model.keras")  # safe_mode=True; vocabulary checked

`load` refuses a file that would run code (a `Lambda` layer's Python
function; Keras' `safe_mode`), names the file when it is missing,
truncated or corrupted instead of failing deep inside `zipfile` or `h5py`,
and refuses a vocabulary saved beside the model whose size is not the
model's.

Only Keras and the standard library here (the vocabulary check loads
`zoo.data` when it runs), so `zoo.training` may use it.
"""

import json
import zipfile
from pathlib import Path

import keras

from zoo.files import atomic_path

# Vocabulary files the recipes write beside their models, by name.
VOCABULARY_FILES = ("vocabulary.txt", "chars.json", "vocabulary.json")


class ModelFileError(ValueError):
    """A model or weights file that cannot or must not be loaded."""


def save(model, path):
    """Saves `model` to a `.keras` file atomically: a kill during the save
    leaves the previous file whole.

    Args:
        model: a `keras.Model`.
        path: str or `pathlib.Path`, ending in `.keras`.
    """
    path = Path(path)
    if path.suffix != ".keras":
        raise ModelFileError(f"{path}: expected a path ending in '.keras' for a whole model.")
    with atomic_path(path) as tmp:
        model.save(tmp)
    return path


def save_weights(model, path):
    """Saves `model`'s weights to a `.weights.h5` file atomically."""
    path = Path(path)
    if not path.name.endswith(".weights.h5"):
        raise ModelFileError(f"{path}: expected a path ending in '.weights.h5'.")
    with atomic_path(path) as tmp:
        model.save_weights(tmp)
    return path


def _check_readable(path, kind):
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file; expected a {kind} file.")
    if path.stat().st_size == 0:
        raise ModelFileError(f"{path}: the file is empty; expected a {kind} file.")
    return path


def _unreadable(path, kind, error):
    return ModelFileError(
        f"{path}: not a readable {kind} file ({type(error).__name__}: {error}); it is truncated or "
        f"corrupted, or was not written by Keras. Expected a {kind} file written by "
        f"{'model.save()' if kind == '.keras' else 'model.save_weights()'}."
    )


def load(path, safe_mode=True, compile=True, vocabulary="auto", custom_objects=None):
    """Loads a `.keras` model file, safely.

    Args:
        path: str or `pathlib.Path`.
        safe_mode: bool. True (the default) refuses files whose layers
            would run arbitrary Python code when loaded (`Lambda`). Pass
            False only for files you trust.
        compile: bool. Restore the optimizer and loss too.
        vocabulary: `"auto"` checks a vocabulary file saved beside the
            model (`vocabulary.txt`, `chars.json` or `vocabulary.json`)
            against the model's vocabulary size; a path checks that file;
            None checks nothing.
        custom_objects: dict, passed to `keras.saving.load_model`.

    Returns:
        The `keras.Model`.

    Raises:
        ModelFileError: the file is missing, empty, truncated, corrupted,
            needs `safe_mode=False`, or its vocabulary does not match.
    """
    path = _check_readable(path, ".keras")
    if not zipfile.is_zipfile(path):
        raise _unreadable(path, ".keras", zipfile.BadZipFile("not a zip archive"))
    try:
        model = keras.saving.load_model(path, compile=compile, safe_mode=safe_mode, custom_objects=custom_objects)
    except (zipfile.BadZipFile, OSError, EOFError, json.JSONDecodeError) as error:
        raise _unreadable(path, ".keras", error) from error
    except ValueError as error:
        if "safe_mode" in str(error) or "Lambda" in str(error):
            raise ModelFileError(
                f"{path}: refused to load: the file contains a layer that would run arbitrary Python code "
                "when loaded (a `Lambda` layer's function). zoo loads with safe_mode=True; pass "
                "safe_mode=False only for a file you trust."
            ) from error
        raise
    if vocabulary == "auto":
        found = [path.parent / name for name in VOCABULARY_FILES if (path.parent / name).is_file()]
        vocabulary = found[0] if found else None
    if vocabulary is not None:
        check_vocabulary(model, vocabulary)
    return model


def load_weights(model, path):
    """`model.load_weights(path)` with a clear error for a missing,
    truncated or corrupted file, or one that holds another model's
    weights."""
    path = Path(path)
    kind = ".keras" if path.suffix == ".keras" else ".weights.h5"
    _check_readable(path, kind)
    try:
        model.load_weights(path)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError) as error:
        raise _unreadable(path, kind, error) from error
    except ValueError as error:
        raise ModelFileError(f"{path}: the weights do not fit this model: {error}") from error
    if kind == ".weights.h5":
        stored = _count_stored_weights(path)
        if stored != len(model.weights):
            # Keras loads what the model asks for and ignores the rest, so a
            # file of a deeper model would load silently into a shallower one.
            raise ModelFileError(
                f"{path}: the weights do not fit this model: the file holds {stored} weight arrays, "
                f"the model has {len(model.weights)}; expected the weights of a model of the same configuration."
            )
    return model


def _count_stored_weights(path):
    """The number of weight arrays in a `.weights.h5` file, the optimizer's aside."""
    import h5py

    names = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return sum(1 for name in names if not name.startswith("optimizer/"))


def model_vocabulary_size(model):
    """The number of token ids a zoo model embeds, or None."""
    for owner in (model, getattr(model, "backbone", None)):
        size = getattr(owner, "vocabulary_size", None)
        if isinstance(size, int):
            return size
    return None


def vocabulary_size_of(path):
    """The number of tokens in a vocabulary file the recipes write."""
    from zoo.tokenizers import CharVocabulary, WordVocabulary

    path = Path(path)
    if path.name.endswith(".txt"):
        lines = path.read_text(encoding="utf-8").split("\n")
        while lines and not lines[-1]:
            lines.pop()
        return len(lines)
    data = json.loads(path.read_text(encoding="utf-8"))
    if "characters" in data:
        return CharVocabulary.load(path).vocabulary_size
    if "words" in data:
        return WordVocabulary.load(path).vocabulary_size
    raise ModelFileError(f"{path}: expected a vocabulary file written by the zoo (characters or words).")


def check_vocabulary(model, vocabulary):
    """Raises `ModelFileError` when the vocabulary (a file, or an object
    with `vocabulary_size` as an int or a method) does not have the
    model's vocabulary size."""
    expected = model_vocabulary_size(model)
    if expected is None:
        return
    if isinstance(vocabulary, (str, Path)):
        size, name = vocabulary_size_of(vocabulary), str(vocabulary)
    else:
        size = vocabulary.vocabulary_size
        size, name = (size() if callable(size) else size), type(vocabulary).__name__
    if size != expected:
        raise ModelFileError(
            f"{name}: the vocabulary has {size} tokens but the model embeds {expected}; expected the "
            "vocabulary saved with this model (a different vocabulary would decode to the wrong text)."
        )
