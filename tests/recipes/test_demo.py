"""The synthetic demo: a smoke run that translates held-out sentences."""

import pytest

from recipes import demo
from zoo.data import DataError

FAST = ["--num-pairs", "600", "--epochs", "1", "--batch-size", "32", "--num-samples", "3", "--jit-compile", "false"]


def test_smoke_run_translates_unseen_sentences_and_prints_val_accuracy_last(tmp_path, capsys):
    output = tmp_path / "run"
    accuracy = demo.main(["--output", str(output), *FAST])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2:] == [f"run folder: {output}", f"val_accuracy={accuracy:.4f}"]
    assert 0.0 <= accuracy <= 1.0
    assert sum("(reference: " in line for line in lines) == 3  # source -> output (reference: ...)
    for name in ("model.keras", "vocabulary.json", "history.csv", "curves.png", "run.json"):
        assert (output / name).is_file(), name
    assert (output / "logs").is_dir() and not (output / "backup").exists()


def test_only_the_toy_grammar_is_data(tmp_path):
    with pytest.raises(DataError, match="expected 'toy'"):
        demo.main(["--data", str(tmp_path / "corpus"), "--output", str(tmp_path / "run"), *FAST])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_default_demo_learns_the_grammar(tmp_path):
    assert demo.main(["--output", str(tmp_path / "run")]) >= 0.9
