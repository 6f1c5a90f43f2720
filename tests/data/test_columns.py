"""A user's own CSV, TSV and JSONL files: named columns, labels, sentence
pairs for translation, and the packing of BERT's sentence pairs; every
refusal names the file, the line and what was expected."""

import json

import numpy as np
import pytest

from zoo.data import (
    DataError,
    hold_out,
    is_pair_source,
    label_ids,
    label_names,
    pack_sentences,
    read_columns,
    read_pairs,
)

ROWS = [("a gripping film, with a twist", "good"), ('a "dull"\nmess', "bad"), ("fine", "good")]


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def tables(tmp_path):
    import csv

    with open(tmp_path / "rows.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "text"])
        writer.writerows([(label, text) for text, label in ROWS])
    with open(tmp_path / "rows.tsv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["text", "label", "extra"])
        writer.writerows([(text, label, "x") for text, label in ROWS])
    write(tmp_path / "rows.jsonl", "".join(json.dumps({"text": t, "label": label}) + "\n" + ("\n" if i == 0 else "")
                                           for i, (t, label) in enumerate(ROWS)))
    return tmp_path


@pytest.mark.parametrize("name, lines", [("rows.csv", [2, 3, 5]), ("rows.tsv", [2, 3, 5]), ("rows.jsonl", [1, 3, 4])])
def test_the_three_formats_read_the_same_rows_with_the_line_each_starts_on(tables, name, lines):
    rows = read_columns(tables / name, ["text", "label"])
    assert rows["text"] == [t for t, _ in ROWS] and rows["label"] == [label for _, label in ROWS]
    assert rows.lines == lines and len(rows) == 3
    assert rows.where(2) == f"{tables / name}, line {lines[2]}"


def test_an_optional_column_is_read_where_the_file_has_it(tables):
    assert read_columns(tables / "rows.tsv", ["text"], optional=["extra"])["extra"] == ["x"] * 3
    assert "extra" not in read_columns(tables / "rows.csv", ["text"], optional=["extra"])


@pytest.mark.parametrize("name, text, message", [
    ("a.csv", "text,label\nfine,good\n", r"a\.csv, line 1: the header names no 'team' column; expected a header line "
                                         r"naming text, team; it names text, label"),
    ("b.jsonl", '{"text": "fine", "team": "x"}\n{"text": "dull"}\n', r"b\.jsonl, line 2: no 'team' field"),
    ("c.jsonl", '{"text": "fine", "team": "x"}\n{"text": \n', r"c\.jsonl, line 2: not JSON \(.*\); expected one JSON object"),
    ("d.jsonl", '["fine", "x"]\n', r"d\.jsonl, line 1: a JSON list; expected a JSON object"),
    ("e.csv", "\n \n", r"e\.csv: empty; expected rows with the columns text, team"),
    ("f.csv", "text,team\n", r"f\.csv: a header and no rows"),
    ("g.tsv", "text\tteam\nfine\tx\tmore\n", r"g\.tsv, line 2: 3 fields; expected 2"),
    ("h.txt", "text,team\n", r"h\.txt: a \.txt file; expected a \.csv, \.tsv or \.jsonl file"),
    ("i.jsonl", '{"text": ["a"], "team": "x"}\n', r"i\.jsonl, line 1: text is a JSON list; expected a string"),
])
def test_bad_files_are_refused_in_one_line_naming_the_file_and_line(tmp_path, name, text, message):
    with pytest.raises(DataError, match=message):
        read_columns(write(tmp_path / name, text), ["text", "team"])


def test_a_missing_file_is_named():
    with pytest.raises(DataError, match=r"nowhere\.csv: no such file; expected a \.csv file"):
        read_columns("nowhere.csv", ["text"])


def test_labels_are_sorted_numerically_when_they_are_integers_and_unknown_ones_are_refused(tables):
    assert label_names(["10", "2", "1"]) == ["1", "2", "10"]
    assert label_names(["neg", "pos", "neutral", "neg"]) == ["neg", "neutral", "pos"]
    rows = read_columns(tables / "rows.csv", ["text", "label"])
    assert label_ids(rows, "label", ["bad", "good"]) == [1, 0, 1]
    with pytest.raises(DataError, match=r"rows\.csv, line 3: label 'bad' is not in the training split's label set "
                                        r"\(good, meh\); expected one of them"):
        label_ids(rows, "label", ["good", "meh"])


def test_hold_out_is_a_partition_fixed_by_its_seed():
    kept, held = hold_out(100, 0.1, seed=3)
    assert len(held) == 10 and sorted(kept + held) == list(range(100)) and not set(kept) & set(held)
    assert hold_out(100, 0.1, seed=3) == (kept, held) and hold_out(100, 0.1, seed=4) != (kept, held)
    assert len(hold_out(3, 0.01, seed=0)[1]) == 1
    with pytest.raises(DataError, match="at least 2"):
        hold_out(1, 0.5, seed=0)


def test_translation_pairs_in_every_form_read_the_same(tmp_path):
    pairs = [("le chat noir.", "the black cat."), ("un chien, grand.", "a big dog.")]
    write(tmp_path / "p.tsv", "fr\ten\n" + "".join(f"{s}\t{t}\n" for s, t in pairs))
    write(tmp_path / "p.jsonl", "".join(json.dumps({"en": t, "fr": s}) + "\n" for s, t in pairs))
    write(tmp_path / "q.jsonl", "".join(json.dumps({"translation": {"fr": s, "en": t}}) + "\n" for s, t in pairs))
    write(tmp_path / "c.fr", "".join(s + "\n" for s, _ in pairs))
    write(tmp_path / "c.en", "".join(t + "\n" for _, t in pairs) + "\n")
    expected = ([s for s, _ in pairs], [t for _, t in pairs])
    for source in ("p.tsv", "p.jsonl", "q.jsonl", f"{tmp_path / 'c.fr'},{tmp_path / 'c.en'}"):
        path = source if "," in source else tmp_path / source
        assert is_pair_source(path)
        assert read_pairs(path, "fr", "en") == expected, source
    assert not is_pair_source("multi30k") and not is_pair_source("tfds:wmt14_translate/de-en")


def test_bad_pairs_are_refused_in_one_line(tmp_path):
    write(tmp_path / "a.fr", "un\ndeux\n")
    write(tmp_path / "a.en", "one\n")
    with pytest.raises(DataError, match=r"a\.fr has 2 lines and .*a\.en 1; expected aligned files"):
        read_pairs(f"{tmp_path / 'a.fr'},{tmp_path / 'a.en'}", "fr", "en")
    write(tmp_path / "b.jsonl", json.dumps({"translation": {"fr": "un"}}) + "\n")
    with pytest.raises(DataError, match=r"b\.jsonl, line 1: no 'en' string in `translation`"):
        read_pairs(tmp_path / "b.jsonl", "fr", "en")
    write(tmp_path / "c.tsv", "de\ten\nein\tone\n")
    with pytest.raises(DataError, match=r"c\.tsv, line 1: the header names no 'fr' column"):
        read_pairs(tmp_path / "c.tsv", "fr", "en")


def reference_pack(first, second, length, cls, sep):
    """BERT's pair packing in plain Python: cut the longer sentence's last token until both fit."""
    first, second = list(first), list(second)
    while len(first) + len(second) > length - 3:
        if len(first) > len(second):
            first = first[:-1]
        else:
            second = second[:-1]
    tokens = [cls, *first, sep, *second, sep]
    segments = [0] * (len(first) + 2) + [1] * (len(second) + 1)
    return tokens + [0] * (length - len(tokens)), segments + [0] * (length - len(tokens)), len(tokens)


@pytest.mark.parametrize("first, second", [(5, 2), (2, 9), (4, 4), (1, 1), (12, 12)])
def test_sentence_pairs_pack_as_bert_does_cutting_the_longer_first(first, second):
    a, b = list(range(10, 10 + first)), list(range(50, 50 + second))
    packed = pack_sentences([a], [b], 10, cls_id=1, sep_id=2)
    tokens, segments, length = reference_pack(a, b, 10, 1, 2)
    np.testing.assert_array_equal(packed["token_ids"][0], tokens)
    np.testing.assert_array_equal(packed["segment_ids"][0], segments)
    np.testing.assert_array_equal(packed["padding_mask"][0], [1] * length + [0] * (10 - length))


def test_single_sentences_pack_as_cls_tokens_sep_with_segment_zero():
    packed = pack_sentences([[5, 6, 7, 8, 9], [5]], None, 5, cls_id=1, sep_id=2)
    np.testing.assert_array_equal(packed["token_ids"], [[1, 5, 6, 7, 2], [1, 5, 2, 0, 0]])
    assert not packed["segment_ids"].any()
    np.testing.assert_array_equal(packed["padding_mask"], [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
