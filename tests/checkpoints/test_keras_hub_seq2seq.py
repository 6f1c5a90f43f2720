"""keras-hub's T5 and BART presets (`save_to_preset`) loaded by `zoo.from_pretrained`:
the zoo's logits against keras-hub's own forward pass, the tokenizers' ids
against keras-hub's, and the refusals. Tiny random models, nothing downloads."""

import json
import shutil

import keras
import numpy as np
import pytest

import zoo
from tests.checkpoints import bart_checkpoints as bart
from tests.checkpoints import t5_checkpoints as t5
from zoo.models.tensor_names import CheckpointError

TEXTS = ["Übersetze: der Hund läuft schnell über die Straße.", "a café naïve façade — déjà vu", "the dog runs"]


def _randomize(model, seed):
    """Every weight random, norms around 1, so a misplaced tensor shows in the logits."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        if len(shape) == 1:
            variable.assign((1.0 + 0.3 * rng.standard_normal(shape)).astype("float32"))
        else:
            variable.assign((0.3 * rng.standard_normal(shape)).astype("float32"))


def _inputs(vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(3, vocabulary_size, (2, 7)).astype("int32")
    target = rng.integers(3, vocabulary_size, (2, 5)).astype("int32")
    source_mask = np.ones_like(source)
    source_mask[1, 5:] = 0  # a padded source: the mask path counts
    return {"encoder_token_ids": source, "encoder_padding_mask": source_mask,
            "decoder_token_ids": target, "decoder_padding_mask": np.ones_like(target)}


def _t5_preset(folder, proto, gated, tied, seed):
    import keras_hub

    hub_tokenizer = keras_hub.models.T5Tokenizer(proto=proto)
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=hub_tokenizer.vocabulary_size(), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=24, key_value_dim=6, dropout=0.0, activation="gelu" if gated else "relu",
        use_gated_activation=gated, tie_embedding_weights=tied)
    _randomize(backbone, seed)
    task = keras_hub.models.T5Seq2SeqLM(backbone=backbone)
    task.save_to_preset(str(folder))
    hub_tokenizer.save_to_preset(str(folder))
    return folder, task, hub_tokenizer


@pytest.fixture(scope="module")
def t5_presets(tmp_path_factory):
    """{name: (folder, keras-hub task, keras-hub tokenizer)}: T5 v1.0 (ReLU, tied head rescaled by
    d**-0.5) and Flan-T5's layout (gated GELU, untied head)."""
    root = tmp_path_factory.mktemp("keras_hub_t5")
    proto = t5.train_sentence_piece(bart.TRAINING_TEXTS, 60)
    return {"t5-v1.0": _t5_preset(root / "t5", proto, gated=False, tied=True, seed=0),
            "flan-t5": _t5_preset(root / "flan", proto, gated=True, tied=False, seed=1)}


@pytest.mark.parametrize("name", ["t5-v1.0", "flan-t5"])
def test_t5_preset_logits_equal_keras_hubs(t5_presets, name):
    folder, task, _ = t5_presets[name]
    model = zoo.from_pretrained(folder)
    inputs = _inputs(task.backbone.vocabulary_size)
    expected = keras.ops.convert_to_numpy(task(inputs))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)), expected, atol=1e-5, rtol=1e-5)
    config = model.get_config()
    assert (config["gated_feed_forward"], config["tie_output"]) == (name == "flan-t5", name == "t5-v1.0")


def test_t5_tokenizer_ids_equal_keras_hubs(t5_presets):
    folder, _, hub_tokenizer = t5_presets["t5-v1.0"]
    model = zoo.from_pretrained(folder)
    tokenizer, end = model.tokenizer, hub_tokenizer.token_to_id("</s>")
    for text in TEXTS:
        expected = [int(i) for i in keras.ops.convert_to_numpy(hub_tokenizer(text))]
        assert [int(i) for i in keras.ops.convert_to_numpy(tokenizer(text))] == expected + [end]  # T5 ends the source
    assert tokenizer.start_token_id == hub_tokenizer.token_to_id("<pad>")  # transformers' decoder_start_token_id


@pytest.mark.integration  # the first decoding compiles for seconds on TensorFlow
def test_t5_preset_translates(t5_presets):
    model = zoo.from_pretrained(t5_presets["flan-t5"][0])
    assert len(zoo.translate(model, TEXTS[:2], max_length=4)) == 2


def test_refuses_a_missing_weights_file(t5_presets, tmp_path):
    folder = tmp_path / "t5"
    shutil.copytree(t5_presets["t5-v1.0"][0], folder)
    (folder / "model.weights.h5").unlink()
    with pytest.raises(CheckpointError, match="model.weights.h5: does not exist"):
        zoo.from_pretrained(folder)


@pytest.mark.integration  # keras-hub builds the model before it finds the weights do not fit
def test_refuses_weights_of_another_layout(t5_presets, tmp_path):
    folder = tmp_path / "t5"
    shutil.copytree(t5_presets["t5-v1.0"][0], folder)
    shutil.copy(t5_presets["flan-t5"][0] / "model.weights.h5", folder / "model.weights.h5")  # gated, untied
    with pytest.raises(CheckpointError, match="could not load the preset"):
        zoo.from_pretrained(folder)


def test_refuses_an_unknown_backbone(t5_presets, tmp_path):
    folder = tmp_path / "t5"
    shutil.copytree(t5_presets["t5-v1.0"][0], folder)
    config = json.loads((folder / "config.json").read_text())
    config["registered_name"] = "keras_hub>MT5Backbone"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="MT5Backbone; expected one of"):
        zoo.from_pretrained(folder)


@pytest.fixture(scope="module")
def bart_preset(tmp_path_factory):
    """(folder, keras-hub BartSeq2SeqLM, keras-hub BartTokenizer) of a tiny random BART."""
    import keras_hub

    folder = tmp_path_factory.mktemp("keras_hub_bart")
    vocabulary, merges = bart.vocabulary_and_merges()
    hub_tokenizer = keras_hub.models.BartTokenizer(vocabulary=vocabulary, merges=[f"{a} {b}" for a, b in merges])
    backbone = keras_hub.models.BartBackbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=2,
                                             hidden_dim=16, intermediate_dim=24, dropout=0.0, max_sequence_length=32)
    _randomize(backbone, seed=5)
    task = keras_hub.models.BartSeq2SeqLM(backbone=backbone)
    task.save_to_preset(str(folder))
    hub_tokenizer.save_to_preset(str(folder))
    return folder, task, hub_tokenizer


def test_bart_preset_logits_equal_keras_hubs(bart_preset):
    folder, task, _ = bart_preset
    model = zoo.from_pretrained(folder)
    inputs = _inputs(task.backbone.vocabulary_size, seed=1)
    expected = keras.ops.convert_to_numpy(task(inputs))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)), expected, atol=1e-5, rtol=1e-5)


def test_bart_tokenizer_ids_equal_keras_hubs(bart_preset):
    folder, _, hub_tokenizer = bart_preset
    model = zoo.from_pretrained(folder)
    start, end = hub_tokenizer.start_token_id, hub_tokenizer.end_token_id
    for text in TEXTS:
        expected = [int(i) for i in keras.ops.convert_to_numpy(hub_tokenizer(text))]
        assert [int(i) for i in keras.ops.convert_to_numpy(model.tokenizer(text))] == [start, *expected, end]
    assert model.tokenizer.detokenize(model.tokenizer(TEXTS[1])) == TEXTS[1]


@pytest.mark.integration  # the first decoding compiles for seconds on TensorFlow
def test_bart_preset_translates(bart_preset):
    model = zoo.from_pretrained(bart_preset[0])
    assert len(zoo.translate(model, TEXTS[:2], max_length=4)) == 2
