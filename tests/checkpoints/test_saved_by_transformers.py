"""Folders that transformers >= 5 wrote itself (`save_pretrained`; see
tests/checkpoints/saved_by_transformers/make.py), read as transformers reads them:
T5 v1.1's `scale_decoder_outputs`, and generation settings from generation_config.json whole."""

import json
import shutil
from pathlib import Path

import keras
import numpy as np

import zoo
from tests.checkpoints.saved_by_transformers.make import tokenizer_files

HERE = Path(__file__).parent / "saved_by_transformers"
EXPECTED = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))


def folder(name, tmp_path):
    return tokenizer_files(shutil.copytree(HERE / name, tmp_path / name))


def test_t5_v1_1_is_not_rescaled_where_transformers_5_ties_its_head(tmp_path):
    """transformers >= 5 writes a v1.1 folder with `tie_word_embeddings: true` and
    `scale_decoder_outputs: false`: the logits are transformers' own, not d_model**-0.5 of them."""
    config = json.loads((HERE / "t5-v1_1" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["scale_decoder_outputs"] is False
    expected = EXPECTED["t5-v1_1"]
    model = zoo.from_pretrained(folder("t5-v1_1", tmp_path))
    source, target = np.array(expected["encoder_token_ids"]), np.array(expected["decoder_token_ids"])
    logits = model({"encoder_token_ids": source, "encoder_padding_mask": np.ones_like(source),
                    "decoder_token_ids": target, "decoder_padding_mask": np.ones_like(target)})
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), np.array(expected["logits"]), rtol=1e-4, atol=1e-4)


def test_t5_export_writes_what_transformers_5_reads(tmp_path):
    model = zoo.from_pretrained(folder("t5-v1_1", tmp_path))
    written = json.loads((zoo.export(model, tmp_path / "out") / "config.json").read_text())
    assert (written["tie_word_embeddings"], written["scale_decoder_outputs"]) == (True, False)
    again = zoo.from_pretrained(tmp_path / "out")
    assert again.get_config()["scale_tied_output"] is False


def test_generation_config_json_is_read_whole(tmp_path):
    """config.json keeps `forced_eos_token_id`, generation_config.json leaves it out: transformers
    forces no `</s>`, and neither does the zoo."""
    path = folder("marian-forced-eos-left-out", tmp_path)
    assert json.loads((path / "config.json").read_text())["forced_eos_token_id"] == 0
    assert "forced_eos_token_id" not in json.loads((path / "generation_config.json").read_text())
    expected = EXPECTED["marian-forced-eos-left-out"]
    model = zoo.from_pretrained(path)
    ids = expected["generated_ids"]
    assert ids[-1] != model.tokenizer.end_token_id  # what the test is about: no forced `</s>`
    assert zoo.translate(model, [expected["sentence"]]) == [model.tokenizer.detokenize(ids[1:])]


def test_config_json_is_read_only_without_a_generation_config(tmp_path):
    path = folder("marian-forced-eos-left-out", tmp_path)
    (path / "generation_config.json").unlink()
    model = zoo.from_pretrained(path)
    ids = EXPECTED["marian-forced-eos-left-out"]["generated_ids"]
    new_tokens = len(ids) - 1  # transformers' max_length counts the decoder's start token
    translation = zoo.translate(model, [EXPECTED["marian-forced-eos-left-out"]["sentence"]], max_length=new_tokens)
    # config.json's forced `</s>` now ends the output: one token fewer than transformers' above.
    assert translation == [model.tokenizer.detokenize(ids[1:-1])]
