"""The gpt_char recipe: a smoke run on a tiny text, its refusals, and (slow)
nanoGPT's CPU baby GPT on Tiny Shakespeare."""

import pytest

from recipes import gpt_char
from tests.recipes.figures import GPT_CHAR
from tests.recipes.same_seed import assert_equal_weights, differ, run_printing
from tests.shared_data import needs
from zoo.data import DataError

TEXT = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain, again.\n\n" * 30
FAST = ["--preset", "nano", "--steps", "4", "--steps-per-epoch", "2", "--batch-size", "4",
        "--eval-batches", "2", "--sample-length", "10", "--jit-compile", "false"]
FILES = ("model.keras", "chars.json", "history.csv", "curves.png", "attention.png", "run.json")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt_char")
    data = folder / "input.txt"
    data.write_text(TEXT, encoding="utf-8")
    output = folder / "run"
    val_loss, lines = run_printing(gpt_char.main, ["--data", str(data), "--output", str(output), *FAST])
    return data, output, val_loss, lines


@pytest.mark.integration
def test_smoke_run_writes_everything_and_prints_val_loss_last(finished_run):
    data, output, val_loss, lines = finished_run
    assert lines[-1] == f"val_loss={val_loss:.4f}"
    assert 0.0 < val_loss < 10.0
    for name in FILES:
        assert (output / name).is_file(), name
    assert not (output / "backup").exists()  # removed once the run finished


def test_the_same_command_trains_the_same_weights_and_another_seed_others(finished_run, tmp_path):
    data, output, _, _ = finished_run
    for folder, seed in ((tmp_path / "again", []), (tmp_path / "seed8", ["--seed", "8"])):
        run_printing(gpt_char.main, ["--data", str(data), "--output", str(folder), *FAST, *seed])
    assert_equal_weights(output, tmp_path / "again")
    assert differ(output, tmp_path / "seed8"), "--seed 8 trained the default seed's weights"


@pytest.mark.integration
def test_refuses_to_overwrite_a_finished_run(finished_run):
    data, output, _, _ = finished_run
    model = output / "model.keras"
    before = model.stat().st_mtime_ns
    with pytest.raises(FileExistsError, match="--overwrite"):
        gpt_char.main(["--data", str(data), "--output", str(output), *FAST])
    assert model.stat().st_mtime_ns == before


def test_too_short_text_names_the_file_and_writes_nothing(tmp_path):
    data = tmp_path / "short.txt"
    data.write_text("To be, or not to be" * 5, encoding="utf-8")
    with pytest.raises(DataError, match="short.txt.*too short"):
        gpt_char.main(["--data", str(data), "--output", str(tmp_path / "run"), *FAST])
    assert not (tmp_path / "run").exists()


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="nowhere.txt"):
        gpt_char.main(["--data", str(tmp_path / "nowhere.txt"), "--output", str(tmp_path / "run"), *FAST])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@needs("tinyshakespeare")
def test_baby_gpt_reaches_the_headline_validation_loss(tmp_path):
    """The README's gpt_char figure: 2000 steps of the baby GPT (a few
    minutes on a 2-core CPU) on the data set by name, as the README runs
    it; the ceiling is in figures.py."""
    val_loss = gpt_char.main([*GPT_CHAR["command"], "--output", str(tmp_path / "run")])
    assert val_loss <= GPT_CHAR["val_loss_at_most"], f"val loss {val_loss:.4f}; the README reports {GPT_CHAR['reached']}"
