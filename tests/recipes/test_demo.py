"""The synthetic demo: a smoke run that translates held-out sentences."""

import pytest

from recipes import demo
from tests.recipes.same_seed import assert_equal_weights, run_printing
from zoo.data import DataError

FAST = ["--num-pairs", "600", "--epochs", "1", "--batch-size", "32", "--num-samples", "3", "--jit-compile", "false"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("demo") / "run"
    return (output, *run_printing(demo.main, ["--output", str(output), *FAST]))


@pytest.mark.integration
def test_smoke_run_translates_unseen_sentences_and_prints_val_accuracy_last(finished_run):
    output, accuracy, lines = finished_run
    assert lines[-2:] == [f"run folder: {output}", f"val_accuracy={accuracy:.4f}"]
    assert 0.0 <= accuracy <= 1.0
    assert sum("(reference: " in line for line in lines) == 3  # source -> output (reference: ...)
    for name in ("model.keras", "vocabulary.json", "history.csv", "curves.png", "run.json"):
        assert (output / name).is_file(), name
    assert (output / "logs").is_dir() and not (output / "backup").exists()


@pytest.mark.integration
def test_the_same_command_trains_the_same_weights(finished_run, tmp_path):
    run_printing(demo.main, ["--output", str(tmp_path / "again"), *FAST])
    assert_equal_weights(finished_run[0], tmp_path / "again")


def test_only_the_toy_grammar_is_data(tmp_path):
    with pytest.raises(DataError, match="expected 'toy'"):
        demo.main(["--data", str(tmp_path / "corpus"), "--output", str(tmp_path / "run"), *FAST])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_default_demo_learns_the_grammar(tmp_path):
    assert demo.main(["--output", str(tmp_path / "run")]) >= 0.9
