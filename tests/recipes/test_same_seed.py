"""The same command gives the same model: each recipe, run twice on tiny data
with the same `--seed`, writes `model.keras` files with equal weights (on
TensorFlow, one machine). For gpt_char a third run with another seed must
differ."""

import numpy as np
import pytest

import zoo
from recipes import bert_classify, bert_pretrain, demo, gpt_char, gpt_finetune, translate
from tests.pretrained import checkpoints as ck
from tests.recipes import test_bert as bert_tests
from tests.recipes import test_demo as demo_tests
from tests.recipes import test_gpt_char as gpt_char_tests
from tests.recipes import test_pretrained_recipes as pretrained_tests
from tests.recipes import test_translate as translate_tests


def weights(folder):
    return zoo.load(folder / "model.keras").get_weights()


def trained_weights(recipe, flags, tmp_path, seeds=(7, 7)):
    """The weights of a run of `recipe` with `flags` for each seed."""
    return [weights(_run(recipe, flags, tmp_path / f"run{i}", seed)) for i, seed in enumerate(seeds)]


def _run(recipe, flags, output, seed):
    recipe.main([*flags, "--output", str(output), "--seed", str(seed)])
    return output


def assert_same_seed_same_weights(runs):
    first, again = runs[:2]
    assert len(first) == len(again)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_gpt_char(tmp_path):
    data = tmp_path / "input.txt"
    data.write_text(gpt_char_tests.TEXT, encoding="utf-8")
    runs = trained_weights(gpt_char, ["--data", str(data), *gpt_char_tests.FAST], tmp_path, seeds=(7, 7, 8))
    assert_same_seed_same_weights(runs)
    assert any(not np.array_equal(a, b) for a, b in zip(runs[0], runs[2])), "seed 8 trained seed 7's weights"


def test_gpt_finetune(tmp_path):
    checkpoint = ck.hf_gpt2_folder(tmp_path / "gpt2")
    (tmp_path / "text.txt").write_text(pretrained_tests.TEXT, encoding="utf-8")
    flags = ["--pretrained", str(checkpoint), "--data", str(tmp_path / "text.txt"),
             *pretrained_tests.FINETUNE]
    assert_same_seed_same_weights(trained_weights(gpt_finetune, flags, tmp_path))


def test_translate(tmp_path):
    translate_tests.write_pairs(tmp_path / "data", "train", 64)
    translate_tests.write_pairs(tmp_path / "data", "val", 12, seed=1)
    flags = ["--data", str(tmp_path / "data"), *translate_tests.FAST]
    assert_same_seed_same_weights(trained_weights(translate, flags, tmp_path))


@pytest.fixture
def sst2(tmp_path):
    folder = tmp_path / "sst2"
    bert_tests.write_tsv(folder, "train", bert_tests.sentiment_rows(160, 0))
    bert_tests.write_tsv(folder, "dev", bert_tests.sentiment_rows(36, 1))
    return folder


def test_bert_pretrain(sst2, tmp_path):
    assert_same_seed_same_weights(trained_weights(bert_pretrain, ["--data", str(sst2), *bert_tests.PRETRAIN], tmp_path))


def test_bert_classify(sst2, tmp_path):
    assert_same_seed_same_weights(trained_weights(bert_classify, ["--data", str(sst2), *bert_tests.CLASSIFY], tmp_path))


def test_demo(tmp_path):
    assert_same_seed_same_weights(trained_weights(demo, demo_tests.FAST, tmp_path))
