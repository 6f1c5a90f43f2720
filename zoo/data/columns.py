"""Named columns of a user's own CSV, TSV or JSONL file: labelled
sentences (a text column, an optional second text, a label) or sentence
pairs (a source and a target column), as the Hugging Face `datasets`
loaders read them.

    texts = read_columns("tickets.csv", ["text", "label"])
    texts["text"][0], texts["label"][0], texts.lines[0]   # the first row, and its line in the file

A CSV or TSV file starts with a header line naming its columns (quoted
fields may hold the separator or a line break, as the `csv` module reads
them); a JSONL file holds one JSON object a line. Every `DataError` names
the file, the line and what was expected.
"""

import csv
import json
from pathlib import Path

from zoo.errors import DataError, at

FORMATS = {".csv": ",", ".tsv": "\t", ".jsonl": None, ".json": None}


class Columns(dict):
    """{column name: list of str}, one entry a row, and `lines`: the
    1-based line of the file where each row starts."""

    def __init__(self, values, lines, path):
        super().__init__(values)
        self.lines, self.path = lines, Path(path)

    def __len__(self):
        return len(self.lines)

    def where(self, row):
        """"FILE, line N" of a row, for an error message."""
        return at(self.path, self.lines[row])


def is_table(path):
    """Whether `path` names a file this module reads (by its suffix)."""
    return Path(path).suffix.lower() in FORMATS


def read_columns(path, columns, optional=()):
    """The named columns of a CSV, TSV or JSONL file.

    Args:
        path: a `.csv`, `.tsv` or `.jsonl` file (`.json`: JSON lines too).
        columns: the names every row must have.
        optional: names read where the file has them (a CSV/TSV header
            that lacks one leaves it out of the result).

    Returns:
        `Columns`: {name: list of str} with the rows in file order.

    Raises:
        DataError: the file is missing, empty, not UTF-8, has a line that is
            not JSON or not an object, or lacks a column.
    """
    path = Path(path)
    separator = FORMATS.get(path.suffix.lower(), "?")
    if separator == "?":
        raise DataError(f"{path}: a {path.suffix or 'suffix-less'} file; expected a .csv, .tsv or .jsonl file")
    if not path.is_file():
        raise DataError(f"{path}: no such file; expected a {path.suffix} file of rows with the columns "
                        f"{', '.join(columns)}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 ({error.reason} at byte {error.start}); expected a UTF-8 file") from None
    if not text.strip():
        raise DataError(f"{path}: empty; expected rows with the columns {', '.join(columns)}")
    rows = _json_rows(path, text) if separator is None else _separated_rows(path, text, separator, columns)
    if not rows:
        raise DataError(f"{path}: a header and no rows; expected rows with the columns {', '.join(columns)}")
    wanted = list(columns) + [name for name in optional if any(name in row for _, row in rows)]
    values = {name: [] for name in wanted}
    for line, row in rows:
        for name in wanted:
            if name not in row:
                raise DataError(f"{at(path, line)}: no {name!r} field; expected every row to have "
                                f"{', '.join(wanted)}; it has {', '.join(map(str, row)) or 'none'}")
            values[name].append(_text(row[name], path, line, name))
    return Columns(values, [line for line, _ in rows], path)


def _json_rows(path, text):
    rows = []
    for line, content in enumerate(text.split("\n"), start=1):
        if not content.strip():
            continue
        try:
            row = json.loads(content)
        except json.JSONDecodeError as error:
            raise DataError(f"{at(path, line)}: not JSON ({error.msg} at column {error.colno}); expected one JSON "
                            "object a line") from None
        if not isinstance(row, dict):
            raise DataError(f"{at(path, line)}: a JSON {type(row).__name__}; expected a JSON object of fields")
        rows.append((line, row))
    return rows


def _separated_rows(path, text, separator, columns):
    reader = csv.reader(text.splitlines(keepends=True), delimiter=separator)
    try:
        header = [name.strip() for name in next(reader)]
        missing = [name for name in columns if name not in header]
        if missing:
            raise DataError(f"{at(path, 1)}: the header names no {missing[0]!r} column; expected a header line "
                            f"naming {', '.join(columns)}; it names {', '.join(header)}")
        rows, start = [], reader.line_num + 1
        for fields in reader:
            if fields and any(field.strip() for field in fields):
                if len(fields) != len(header):
                    raise DataError(f"{at(path, start)}: {len(fields)} fields; expected {len(header)}, as the "
                                    f"header names ({', '.join(header)})")
                rows.append((start, dict(zip(header, fields))))
            start = reader.line_num + 1
    except csv.Error as error:
        raise DataError(f"{at(path, reader.line_num)}: {error}; expected {path.suffix} rows") from None
    return rows


def _text(value, path, line, name):
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise DataError(f"{at(path, line)}: {name} is a JSON {type(value).__name__}; expected a string")


def label_names(labels):
    """The sorted label set of a training split: numerically where every
    label is an integer ("2" before "10"), else as strings."""
    names = set(labels)
    if all(name.strip().lstrip("-").isdigit() for name in names):
        return sorted(names, key=lambda name: int(name))
    return sorted(names)


def label_ids(columns, name, names, owner="the training split's label set"):
    """Each row's label as its index in `names` (an int list); a
    `DataError` naming the row of a label outside them (`owner`: whose
    labels `names` are, for the message)."""
    index = {label: i for i, label in enumerate(names)}
    ids = []
    for row, label in enumerate(columns[name]):
        if label not in index:
            shown = ", ".join(names) if len(names) <= 20 else ", ".join(names[:20]) + ", ..."
            raise DataError(f"{columns.where(row)}: label {label!r} is not in {owner} ({shown}); expected one of "
                            "them")
        ids.append(index[label])
    return ids


def hold_out(count, fraction, seed):
    """(kept, held): the row indices of a split of `count` rows, `fraction`
    of them (at least one) held out at random by `seed`, each in file order."""
    import numpy as np

    if count < 2:
        raise DataError(f"{count} row(s); expected at least 2 to hold some out for validation")
    held = np.random.default_rng(seed).permutation(count)[: min(count - 1, max(1, round(count * fraction)))]
    held = set(held.tolist())
    return [i for i in range(count) if i not in held], sorted(held)


def is_pair_source(source):
    """Whether `source` names a user's own sentence pairs: a CSV, TSV or
    JSONL file, or two aligned files as "SOURCE_FILE,TARGET_FILE"."""
    source = str(source)
    return is_table(source) or ("," in source and not source.startswith("tfds:"))


def read_pairs(source, source_lang, target_lang):
    """A user's own sentence pairs for translation.

    Args:
        source: a CSV or TSV file with the columns `source_lang` and
            `target_lang`; a JSONL file of {source_lang: ..., target_lang: ...}
            objects, or of {"translation": {source_lang: ..., target_lang: ...}}
            (Hugging Face's translation sets); or "SOURCE_FILE,TARGET_FILE",
            two aligned files of one sentence a line.
        source_lang, target_lang: the language codes, e.g. "de", "en".

    Returns:
        `(sources, targets)`: two lists of str, stripped.

    Raises:
        DataError: naming the file, the line and what was expected.
    """
    if is_table(source):
        path = Path(source)
        if path.suffix.lower() in (".jsonl", ".json") and path.is_file():
            text = path.read_text(encoding="utf-8-sig")
            rows = _json_rows(path, text) if text.strip() else []
            if rows and all("translation" in row for _, row in rows):
                sources, targets = [], []
                for line, row in rows:
                    pair = row["translation"]
                    for lang in (source_lang, target_lang):
                        if not isinstance(pair, dict) or not isinstance(pair.get(lang), str):
                            raise DataError(f"{at(path, line)}: no {lang!r} string in `translation`; expected "
                                            f'{{"translation": {{"{source_lang}": ..., "{target_lang}": ...}}}}')
                    sources.append(pair[source_lang].strip())
                    targets.append(pair[target_lang].strip())
                return sources, targets
        columns = read_columns(source, [source_lang, target_lang])
        return [s.strip() for s in columns[source_lang]], [t.strip() for t in columns[target_lang]]
    names = str(source).split(",")
    if len(names) != 2 or not all(names):
        raise DataError(f"{source}: expected a .csv, .tsv or .jsonl file of pairs, or two aligned files as "
                        "SOURCE_FILE,TARGET_FILE")
    sides = []
    for name in names:
        path = Path(name)
        if not path.is_file():
            raise DataError(f"{path}: no such file; expected a file of one sentence a line")
        lines = path.read_text(encoding="utf-8-sig").split("\n")
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            raise DataError(f"{path}: empty; expected one sentence a line")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise DataError(f"{at(path, number)}: an empty line; expected one sentence a line")
        sides.append([line.strip() for line in lines])
    if len(sides[0]) != len(sides[1]):
        raise DataError(f"{names[0]} has {len(sides[0])} lines and {names[1]} {len(sides[1])}; expected aligned "
                        "files, line i of one the translation of line i of the other")
    return sides[0], sides[1]
