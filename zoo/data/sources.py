"""Readers for text, parallel and labelled corpora.

A *source* is a registered data set's name (`"tinyshakespeare"`,
`"multi30k"`, `"sst2"`: `zoo.data.registry`, fetched, checked and cached on
first use), a local path, or the string `"tfds:NAME"`, a TensorFlow
Datasets name such as `"tfds:tiny_shakespeare"`. TensorFlow Datasets is
imported only when a `tfds:` source is read, and it downloads the data set on
first use; local paths never touch the network. A local folder that has a
registered name is given as a path (`"./sst2"` or a `pathlib.Path`).

Local files are UTF-8. Line files are split on `"\\n"` only (a trailing
`"\\r"` is dropped), so that exotic separators such as U+2028 inside a
sentence cannot shift two aligned files against each other. Empty lines at
the end of a file are dropped; an empty line anywhere else is an error.

Example:
```python
text = read_text("tinyshakespeare")
german, english = read_parallel("multi30k", "train", "de", "en")
sentences, labels = read_labelled("sst2", "dev")
```
"""

from pathlib import Path

import numpy as np

from zoo.data.registry import dataset_path
from zoo.errors import DataError, at

TFDS_PREFIX = "tfds:"

# Our split names on the left, the names TensorFlow Datasets uses on the right.
_TFDS_SPLITS = {"val": "validation", "dev": "validation"}

# Tiny Shakespeare in TFDS is one text cut in three; joined they give it back.
_TFDS_TEXT_SPLITS = ("train", "validation", "test")


def read_text(source):
    """Reads one long text, for character or token level language models.

    Args:
        source: a registered name such as `"tinyshakespeare"`, a path to a
            plain UTF-8 text file, or `"tfds:NAME"` for a
            TensorFlow Datasets text corpus with a `"text"` field, such as
            `"tfds:tiny_shakespeare"`.

    Returns:
        str. The whole text. For a `tfds:` source, the `"text"` fields of the
        train, validation and test splits joined in that order: for Tiny
        Shakespeare this is the original text (the splits are its first 90%
        and two last 5% slices), so the caller splits it 90/10 into
        training and validation as nanoGPT does, the same way as for the
        local `input.txt`.

    Raises:
        DataError: the file is missing, is not UTF-8, or is empty.
    """
    name = _tfds_name(source)
    if name is not None:
        parts = []
        for split in _TFDS_TEXT_SPLITS:
            parts.extend(_decode(ex["text"]) for ex in _tfds_examples(name, split))
        text = "".join(parts)
        if not text:
            raise DataError(f"{source}: expected some text, got none")
        return text
    path = _existing_file(dataset_path(source), "a plain UTF-8 text file")
    text = _read_utf8(path)
    if not text:
        raise DataError(f"{path}: expected some text, got an empty file")
    return text


def read_parallel(source, split, source_lang, target_lang):
    """Reads aligned sentence pairs for translation.

    Args:
        source: a registered name such as `"multi30k"`, a folder holding
            the aligned line files
            `{split}.{source_lang}` and `{split}.{target_lang}` (one sentence
            a line, line i of one the translation of line i of the other,
            as in Multi30k's `train.de` / `train.en`), or `"tfds:NAME"` for a
            TensorFlow Datasets translation set whose examples are dicts keyed
            by language code, such as `"tfds:ted_hrlr_translate/pt_to_en"` or
            `"tfds:wmt14_translate/de-en"`.
        split: str. `"train"`, `"val"`, `"test"`, ...; for `tfds:` sources
            `"val"` and `"dev"` mean TFDS's `"validation"`.
        source_lang: str. The source language code, e.g. `"de"`.
        target_lang: str. The target language code, e.g. `"en"`.

    Returns:
        `(source_sentences, target_sentences)`: two lists of str of the same
        length, stripped of surrounding whitespace.

    Raises:
        DataError: a file is missing or empty, the two files have different
            line counts, or a local file has an empty line before its end.
    """
    name = _tfds_name(source)
    if name is not None:
        sources, targets = [], []
        for ex in _tfds_examples(name, split):
            for lang in (source_lang, target_lang):
                if lang not in ex:
                    raise DataError(
                        f"{source}: expected a field {lang!r}, "
                        f"got fields {sorted(ex)}"
                    )
            sources.append(_decode(ex[source_lang]).strip())
            targets.append(_decode(ex[target_lang]).strip())
        return sources, targets
    folder = dataset_path(source)
    source_path = folder / f"{split}.{source_lang}"
    target_path = folder / f"{split}.{target_lang}"
    sources = _read_lines(source_path)
    targets = _read_lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path} has {len(sources)} lines but {target_path} has "
            f"{len(targets)}: expected aligned files with one sentence a line"
        )
    return sources, targets


def read_labelled(source, split):
    """Reads labelled sentences for classification.

    Args:
        source: a registered name such as `"sst2"`, or a folder holding
            `{split}.tsv`, a tab-separated file of two
            columns, a label (an integer) and a text. An optional header line
            (one whose label field is not an integer) names the columns; the
            column named `label` is the label, so both `label<TAB>sentence`
            and `sentence<TAB>label` work. Without a header the order is
            `label<TAB>text`. Or `"tfds:glue/sst2"` (fields `sentence`,
            `label`) or `"tfds:imdb_reviews"` (fields `text`, `label`).
        split: str. `"train"`, `"dev"`, ...; for `tfds:` sources `"val"` and
            `"dev"` mean TFDS's `"validation"`.

    Returns:
        `(texts, labels)`: a list of N str and an int32 array of shape (N,).

    Raises:
        DataError: the file is missing or has no rows, the header names no
            `label` column, a row has no tab, or a label is not an integer.
    """
    name = _tfds_name(source)
    if name is not None:
        texts, labels = [], []
        for ex in _tfds_examples(name, split):
            field = "sentence" if "sentence" in ex else "text"
            if field not in ex or "label" not in ex:
                raise DataError(
                    f"{source}: expected fields 'label' and 'sentence' or "
                    f"'text', got fields {sorted(ex)}"
                )
            texts.append(_decode(ex[field]))
            labels.append(int(ex["label"]))
        return texts, np.asarray(labels, dtype=np.int32)
    path = dataset_path(source) / f"{split}.tsv"
    lines = _read_lines(path, allow_empty_lines=True)
    label_first, first_row = _tsv_layout(path, lines[0])
    texts, labels = [], []
    for number, line in enumerate(lines[first_row:], start=first_row + 1):
        if "\t" not in line:
            raise DataError(
                f"{at(path, number)}: expected 'label<TAB>text' "
                f"separated by a tab, got {_clip(line)!r}"
            )
        if label_first:
            label, text = line.split("\t", 1)
        else:
            text, label = line.rsplit("\t", 1)
        try:
            labels.append(int(label))
        except ValueError:
            raise DataError(
                f"{at(path, number)}: expected an integer label, "
                f"got {_clip(label)!r}"
            ) from None
        texts.append(text.strip())
    if not texts:
        raise DataError(f"{path}: expected labelled rows, got only a header")
    return texts, np.asarray(labels, dtype=np.int32)


def _tsv_layout(path, first_line):
    """Finds the label column from the first line of a TSV file.

    Returns:
        `(label_first, first_row)`: whether the label is the first column, and
        the index of the first data line (1 after a header, else 0).
    """
    fields = first_line.split("\t")
    if _is_int(fields[0]):
        return True, 0
    names = [field.strip().lower() for field in fields]
    if len(names) != 2 or "label" not in names:
        raise DataError(
            f"{at(path, 1)}: expected a header of two tab-separated columns, "
            f"one named 'label', or a first row 'label<TAB>text' with an "
            f"integer label, got {_clip(first_line)!r}"
        )
    return names[0] == "label", 1


def _read_lines(path, allow_empty_lines=False):
    """Reads the lines of a UTF-8 file, dropping empty lines at its end.

    Args:
        path: `pathlib.Path`.
        allow_empty_lines: bool. If False, an empty line before the end is a
            DataError; if True it is kept (for the caller to report).

    Returns:
        A non-empty list of str, each stripped of surrounding whitespace.
    """
    _existing_file(path, "a UTF-8 file with one example a line")
    lines = [line.strip() for line in _read_utf8(path).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise DataError(f"{path}: expected one example a line, got an empty file")
    if not allow_empty_lines:
        for number, line in enumerate(lines, start=1):
            if not line:
                raise DataError(
                    f"{at(path, number)}: expected one sentence a line, got "
                    f"an empty line (only empty lines at the end are dropped)"
                )
    return lines


def _existing_file(path, what):
    path = Path(path)
    if not path.is_file():
        reason = "is a folder" if path.is_dir() else "does not exist"
        raise DataError(
            f"{path}: {reason}; expected {what}, a data set name (`zoo data list`) or a 'tfds:NAME' source"
        )
    return path


def _read_utf8(path):
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path}: expected UTF-8 text, got an undecodable byte at offset "
            f"{error.start}"
        ) from None


def _tfds_name(source):
    source = str(source)
    return source[len(TFDS_PREFIX):] if source.startswith(TFDS_PREFIX) else None


def _tfds_examples(name, split):
    """Yields the examples of one TFDS split as dicts of NumPy values."""
    import tensorflow_datasets as tfds

    dataset = tfds.load(name, split=_TFDS_SPLITS.get(split, split))
    return tfds.as_numpy(dataset)


def _decode(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _is_int(text):
    try:
        int(text)
    except ValueError:
        return False
    return True


def _clip(text, width=60):
    return text if len(text) <= width else text[:width] + "..."
