"""Readers: local files (good and bad) and TFDS names, offline."""


import numpy as np
import pytest

from tests.shared_data import SHARED_DATA, needs
from zoo.data import DataError, read_labelled, read_parallel, read_text



def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# read_text


def test_read_text_returns_the_whole_file(tmp_path):
    path = write(tmp_path / "input.txt", "To be tested:\nA line of our own\n")
    assert read_text(path) == "To be tested:\nA line of our own\n"
    assert read_text(str(path)) == "To be tested:\nA line of our own\n"


def test_read_text_missing_file_names_it(tmp_path):
    with pytest.raises(DataError, match="nothere.txt.*does not exist"):
        read_text(tmp_path / "nothere.txt")


def test_read_text_empty_file_names_it(tmp_path):
    path = write(tmp_path / "empty.txt", "")
    with pytest.raises(DataError, match="empty.txt.*empty file"):
        read_text(path)


def test_read_text_folder_is_an_error(tmp_path):
    with pytest.raises(DataError, match="is a folder"):
        read_text(tmp_path)


def test_read_text_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café".encode("latin-1"))
    with pytest.raises(DataError, match="latin1.txt.*UTF-8"):
        read_text(path)


# read_parallel


def test_read_parallel_drops_the_final_empty_line(tmp_path):
    # As in Multi30k: the files end with one empty line.
    write(tmp_path / "train.de", "Ein Hund läuft.\nZwei Katzen.\n\n")
    write(tmp_path / "train.en", "A dog runs.\r\nTwo cats.\n\n")
    assert read_parallel(tmp_path, "train", "de", "en") == (
        ["Ein Hund läuft.", "Zwei Katzen."],
        ["A dog runs.", "Two cats."],
    )


def test_read_parallel_missing_file_names_it(tmp_path):
    write(tmp_path / "val.de", "Ein Hund.\n")
    with pytest.raises(DataError, match=r"val\.en.*does not exist"):
        read_parallel(tmp_path, "val", "de", "en")


def test_read_parallel_empty_file_names_it(tmp_path):
    write(tmp_path / "val.de", "Ein Hund.\n")
    write(tmp_path / "val.en", "\n")
    with pytest.raises(DataError, match=r"val\.en.*empty file"):
        read_parallel(tmp_path, "val", "de", "en")


def test_read_parallel_different_line_counts_name_both_files(tmp_path):
    write(tmp_path / "train.de", "eins\nzwei\ndrei\n")
    write(tmp_path / "train.en", "one\ntwo\n")
    with pytest.raises(DataError) as error:
        read_parallel(tmp_path, "train", "de", "en")
    message = str(error.value)
    assert "train.de has 3 lines" in message
    assert "train.en has 2" in message


def test_read_parallel_empty_line_in_the_middle_names_file_and_line(tmp_path):
    write(tmp_path / "train.de", "eins\nzwei\ndrei\n")
    write(tmp_path / "train.en", "one\n\nthree\n")
    with pytest.raises(DataError, match=r"train\.en, line 2: .*empty line"):
        read_parallel(tmp_path, "train", "de", "en")


# read_labelled


@pytest.mark.parametrize(
    "content",
    [
        "label\tsentence\n0\tdull and flat\n1\ta joy\n",  # SST-2 train.tsv
        "label\tcontent\n0\tdull and flat\n1\ta joy\n",  # SST-2 dev.tsv
        "sentence\tlabel\ndull and flat\t0\na joy\t1\n",  # GLUE's order
        "0\tdull and flat\n1\ta joy\n",  # no header
    ],
)
def test_read_labelled_finds_the_label_column(tmp_path, content):
    write(tmp_path / "train.tsv", content)
    texts, labels = read_labelled(tmp_path, "train")
    assert texts == ["dull and flat", "a joy"]
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, [0, 1])


def test_read_labelled_text_may_hold_tabs_after_the_label(tmp_path):
    write(tmp_path / "dev.tsv", "label\tsentence\n1\tone\ttab\n")
    texts, _ = read_labelled(tmp_path, "dev")
    assert texts == ["one\ttab"]


def test_read_labelled_row_without_tab_names_file_and_line(tmp_path):
    write(tmp_path / "train.tsv", "label\tsentence\n0\tfine\nno label here\n")
    with pytest.raises(DataError, match=r"train\.tsv, line 3: expected 'label<TAB>text'"):
        read_labelled(tmp_path, "train")


def test_read_labelled_non_integer_label_names_file_and_line(tmp_path):
    write(tmp_path / "train.tsv", "0\tfine\n1\tgood\npositive\tgreat\n")
    # Without a header, line 3's label "positive" is not an integer.
    with pytest.raises(DataError, match=r"train\.tsv, line 3: expected an integer label, got 'positive'"):
        read_labelled(tmp_path, "train")


def test_read_labelled_empty_line_in_the_middle_names_the_line(tmp_path):
    write(tmp_path / "train.tsv", "label\tsentence\n0\tfine\n\n1\tgood\n")
    with pytest.raises(DataError, match=r"train\.tsv, line 3"):
        read_labelled(tmp_path, "train")


def test_read_labelled_header_without_label_column(tmp_path):
    write(tmp_path / "train.tsv", "index\tsentence\n0\tfine\n")
    with pytest.raises(DataError, match=r"train\.tsv, line 1: .*'label'"):
        read_labelled(tmp_path, "train")


def test_read_labelled_header_only_is_an_error(tmp_path):
    write(tmp_path / "train.tsv", "label\tsentence\n")
    with pytest.raises(DataError, match=r"train\.tsv.*only a header"):
        read_labelled(tmp_path, "train")


def test_read_labelled_missing_file_names_it(tmp_path):
    with pytest.raises(DataError, match=r"dev\.tsv.*does not exist"):
        read_labelled(tmp_path, "dev")


# TensorFlow Datasets, offline: `mock_data` generates random examples from the
# metadata that ships with tensorflow-datasets, so nothing is downloaded.

@pytest.fixture
def tfds():
    """tensorflow_datasets, for the tests that use it (skipped where it is
    not installed, without skipping the rest of this file)."""
    return pytest.importorskip("tensorflow_datasets")


def tfds_examples(tfds, name, split):
    return list(tfds.as_numpy(tfds.load(name, split=split)))


def test_read_text_tfds_joins_train_validation_test(tfds):
    with tfds.testing.mock_data(num_examples=2):
        text = read_text("tfds:tiny_shakespeare")
        expected = "".join(
            ex["text"].decode()
            for split in ("train", "validation", "test")
            for ex in tfds_examples(tfds, "tiny_shakespeare", split)
        )
    assert isinstance(text, str) and text
    assert text == expected


@pytest.mark.parametrize(
    "name, source_lang, target_lang",
    [
        ("ted_hrlr_translate/pt_to_en", "pt", "en"),
        ("wmt14_translate/de-en", "de", "en"),
    ],
)
def test_read_parallel_tfds_maps_val_to_validation(name, source_lang, target_lang, tfds):
    with tfds.testing.mock_data(num_examples=3):
        sources, targets = read_parallel(f"tfds:{name}", "val", source_lang, target_lang)
        examples = tfds_examples(tfds, name, "validation")
    assert sources == [ex[source_lang].decode().strip() for ex in examples]
    assert targets == [ex[target_lang].decode().strip() for ex in examples]
    assert len(sources) == 3


def test_read_parallel_tfds_unknown_language_is_an_error(tfds):
    with tfds.testing.mock_data(num_examples=1):
        with pytest.raises(DataError, match="'fr'"):
            read_parallel("tfds:ted_hrlr_translate/pt_to_en", "train", "fr", "en")


@pytest.mark.parametrize(
    "name, split, tfds_split, field",
    [("glue/sst2", "dev", "validation", "sentence"), ("imdb_reviews", "test", "test", "text")],
)
def test_read_labelled_tfds(name, split, tfds_split, field, tfds):
    with tfds.testing.mock_data(num_examples=4):
        texts, labels = read_labelled(f"tfds:{name}", split)
        examples = tfds_examples(tfds, name, tfds_split)
    assert texts == [ex[field].decode() for ex in examples]
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, [ex["label"] for ex in examples])


# The project's shared copies, where they are present.


@needs("multi30k", "sst2", "tinyshakespeare")
def test_shared_data_sets_read_by_path_and_by_name():
    de, en = read_parallel(SHARED_DATA / "multi30k", "val", "de", "en")
    assert len(de) == len(en) == 1014
    assert read_parallel("multi30k", "val", "de", "en") == (de, en)
    texts, labels = read_labelled(SHARED_DATA / "sst2", "dev")
    assert len(texts) == 872 and set(labels.tolist()) == {0, 1}
    assert read_labelled("sst2", "dev")[0] == texts
    text = read_text(SHARED_DATA / "tinyshakespeare" / "input.txt")
    assert len(text) == 1_115_394 and len(set(text)) == 65
    assert read_text("tinyshakespeare") == text
