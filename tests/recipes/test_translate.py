"""The translate recipe: a smoke run on tiny parallel files, its refusals,
the BLEU helper, and (slow) the Multi30k run behind the README's BLEU."""

import json
from pathlib import Path

import pytest

from recipes import translate
from tests.recipes.figures import TRANSLATE
from zoo.data import DataError
from zoo.training.bleu import corpus_bleu, detokenize

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
GERMAN = ["ein", "mann", "eine", "frau", "hund", "läuft", "spielt", "im", "park", "auf", "der", "straße"]
ENGLISH = ["a", "man", "a", "woman", "dog", "runs", "plays", "in", "park", "on", "the", "street"]
FAST = ["--preset", "transformer-tiny", "--epochs", "1", "--batch-size", "8", "--max-length", "16",
        "--vocabulary-size", "200", "--warmup-steps", "5", "--intermediate-dim", "64", "--beam-size", "2",
        "--jit-compile", "false"]
FILES = ("model.keras", "vocabulary.txt", "history.csv", "curves.png", "attention.png", "translations.txt",
         "run.json")


def write_pairs(folder, split, count, seed=0):
    import random

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    de, en = [], []
    for _ in range(count):
        words = [rng.randrange(len(GERMAN)) for _ in range(rng.randint(2, 7))]
        de.append(" ".join(GERMAN[i] for i in words) + " .")
        en.append(" ".join(ENGLISH[i] for i in words) + " .")
    (folder / f"{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    (folder / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi30k")
    write_pairs(folder, "train", 64)
    write_pairs(folder, "val", 12, seed=1)
    return folder


def test_smoke_run_writes_everything_and_prints_val_bleu_last(data, tmp_path, capsys):
    output = tmp_path / "run"
    bleu = translate.main(["--data", str(data), "--output", str(output), *FAST])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"val_bleu={round(bleu, 2):.4f}"
    assert 0.0 <= bleu <= 100.0
    for name in FILES:
        assert (output / name).is_file(), name
    assert json.loads((output / "run.json").read_text())["finished"]
    assert not (output / "backup").exists()
    assert (output / "vocabulary.txt").read_text(encoding="utf-8").startswith("[PAD]\n")
    with pytest.raises(FileExistsError, match="--overwrite"):  # a finished run stays as it is
        translate.main(["--data", str(data), "--output", str(output), *FAST])


def test_files_of_different_line_counts_name_both_files(data, tmp_path):
    bad = tmp_path / "bad"
    write_pairs(bad, "train", 20)
    write_pairs(bad, "val", 5)
    (bad / "train.en").write_text("\n".join(["a man ."] * 19) + "\n", encoding="utf-8")
    output = tmp_path / "run"
    output.mkdir()
    (output / "keep.txt").write_text("earlier results")
    with pytest.raises(DataError, match=r"train\.de has 20 lines but .*train\.en has 19"):
        translate.main(["--data", str(bad), "--output", str(output), *FAST])
    assert sorted(p.name for p in output.iterdir()) == ["keep.txt"]  # nothing written or lost


def test_missing_and_empty_files_are_clear_errors(tmp_path):
    folder = tmp_path / "data"
    write_pairs(folder, "train", 20)
    with pytest.raises(DataError, match=r"val\.de: does not exist"):
        translate.main(["--data", str(folder), "--output", str(tmp_path / "run"), *FAST])
    (folder / "val.de").write_text("", encoding="utf-8")
    (folder / "val.en").write_text("a man .\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"val\.de: expected one example a line, got an empty file"):
        translate.main(["--data", str(folder), "--output", str(tmp_path / "run"), *FAST])
    (folder / "val.de").write_text("ein mann .\n\nein hund .\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"val\.de, line 2: .*empty line"):
        translate.main(["--data", str(folder), "--output", str(tmp_path / "run"), *FAST])
    assert not (tmp_path / "run").exists()


def test_bleu_is_sacrebleus_on_lowercased_detokenized_text():
    assert detokenize("a man ' s t - shirt , too .") == "a man's t-shirt, too."
    assert detokenize("the players ' jerseys") == "the players ' jerseys"
    assert corpus_bleu(["a man in a t - shirt ."], ["A man in a T-shirt."]) == pytest.approx(100.0)
    assert corpus_bleu(["a dog ."], ["A man in a T-shirt."]) < 10.0


@pytest.mark.slow
def test_multi30k_run_reaches_the_headline_bleu(tmp_path):
    """The README's translate figure: a fixed number of epochs (no time
    budget), about 30 min on a 2-core CPU; the floor is in figures.py."""
    data = SHARED_DATA / "multi30k"
    if not (data / "train.de").is_file():
        pytest.skip(f"{data} is not here")
    bleu = translate.main(["--data", str(data), "--output", str(tmp_path / "run"), *TRANSLATE["command"]])
    assert bleu >= TRANSLATE["val_bleu_at_least"], f"val BLEU {bleu:.2f}; the README reports {TRANSLATE['reached']}"
