"""`zoo.export` then `zoo.from_pretrained` is the identity (weights, logits,
token ids) in both formats; keras-hub loads what the keras-hub export
writes, and the Hugging Face export writes transformers' names and shapes."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import zoo
from tests.checkpoints import stand_ins as ck
from tests.checkpoints.test_from_pretrained import TOLERANCE, _np, bert_inputs, gpt_inputs


def assert_same_weights(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    assert len(wa) == len(wb) > 0
    for x, y in zip(wa, wb):
        np.testing.assert_array_equal(x, y)


def assert_same_token_ids(a, b):
    for sentence in ck.SENTENCES:
        assert _np(a.tokenizer(sentence)).tolist() == _np(b.tokenizer(sentence)).tolist(), sentence


@pytest.fixture(scope="module")
def source(checkpoint_folders):
    return checkpoint_folders


# --- Hugging Face ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert_mlm", "hf_bert_cls", "hf_bert"])
def test_huggingface_export_writes_the_checkpoint_it_was_loaded_from(source, name, tmp_path):
    """Same tensor names, shapes and values, same config keys, same vocabulary files."""
    model = zoo.from_pretrained(source[name])
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    original, written = load_file(str(source[name] / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for key in original:
        np.testing.assert_array_equal(written[key], original[key], err_msg=key)
    config, original_config = json.loads((out / "config.json").read_text()), json.loads((source[name] / "config.json").read_text())
    for key, value in original_config.items():
        if key not in ("n_ctx", "bos_token_id", "eos_token_id"):  # free-standing in transformers' configs
            assert config[key] == value, key
    vocabulary_files = ["vocab.json", "merges.txt"] if name == "hf_gpt2" else ["vocab.txt"]
    for file in vocabulary_files:
        a = (source[name] / file).read_text(encoding="utf-8")
        b = (out / file).read_text(encoding="utf-8")
        assert (json.loads(a) == json.loads(b)) if file.endswith(".json") else a == b, file


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert_cls"])
def test_huggingface_export_then_import_is_the_identity(source, name, tmp_path):
    model = zoo.from_pretrained(source[name])
    # Fine-tuning changes the weights; the round trip must carry the new ones.
    model.set_weights([w + 0.01 * np.random.default_rng(i).standard_normal(w.shape).astype(w.dtype)
                       for i, w in enumerate(model.get_weights())])
    again = zoo.from_pretrained(zoo.export(model, tmp_path / "out", format="huggingface"))
    assert type(again) is type(model)
    assert_same_weights(model, again)
    x = gpt_inputs(model.backbone.vocabulary_size) if name == "hf_gpt2" else bert_inputs(model.backbone.vocabulary_size)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    assert_same_token_ids(model, again)


def test_huggingface_export_loads_in_keras_hub_hugging_face_converter(source, tmp_path):
    """An independent reader of transformers' names: keras-hub's converter."""
    import keras_hub

    model = zoo.from_pretrained(source["kh_gpt2"][0])  # a keras-hub preset, out as a Hugging Face folder
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    hub = keras_hub.models.GPT2Backbone.from_preset(str(out))
    x = gpt_inputs(hub.vocabulary_size, seed=7)
    np.testing.assert_allclose(_np(hub(x)), _np(model.backbone(x)), **TOLERANCE)
    tokenizer = keras_hub.tokenizers.GPT2Tokenizer.from_preset(str(out))
    for sentence in ck.SENTENCES:
        assert _np(tokenizer(sentence)).tolist() == _np(model.tokenizer(sentence)).tolist()


def test_huggingface_export_of_a_masked_lm_matches_the_float64_reference(source, tmp_path):
    model = zoo.from_pretrained(source["hf_bert_mlm"])
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    tensors, config = load_file(str(out / "model.safetensors")), json.loads((out / "config.json").read_text())
    x = bert_inputs(config["vocab_size"], seed=3)
    positions = np.array([[0, 5], [3, 6]], "int32")
    _, _, heads = ck.bert_reference(tensors, config, x["token_ids"], x["segment_ids"], x["padding_mask"])
    expected = np.take_along_axis(heads["masked_lm"], positions[:, :, None], axis=1)
    np.testing.assert_allclose(_np(model({**x, "mask_positions": positions})), expected, **TOLERANCE)


# --- keras-hub ------------------------------------------------------------------------------


def test_keras_hub_export_loads_in_keras_hub_with_the_same_logits(source, tmp_path):
    import keras_hub

    lm = zoo.from_pretrained(source["hf_gpt2"])  # a Hugging Face folder, out as a keras-hub preset
    out = zoo.export(lm, tmp_path / "out", format="keras-hub")
    hub = keras_hub.models.GPT2CausalLM.from_preset(str(out))
    x = gpt_inputs(lm.backbone.vocabulary_size, seed=8)
    np.testing.assert_allclose(_np(hub(x)), _np(lm(x)), **TOLERANCE)
    for sentence in ck.SENTENCES:
        assert _np(hub.preprocessor.tokenizer(sentence)).tolist() == _np(lm.tokenizer(sentence)).tolist()


@pytest.mark.parametrize("name", ["kh_gpt2", "kh_bert_cls"])
def test_keras_hub_export_then_import_is_the_identity(source, name, tmp_path):
    folder, hub = source[name]
    model = zoo.from_pretrained(folder)
    model.set_weights([w * 1.01 for w in model.get_weights()])
    again = zoo.from_pretrained(zoo.export(model, tmp_path / "out", format="keras-hub"))
    assert type(again) is type(model)
    assert_same_weights(model, again)
    x = gpt_inputs(hub.backbone.vocabulary_size) if name == "kh_gpt2" else bert_inputs(hub.backbone.vocabulary_size)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    assert_same_token_ids(model, again)


def test_keras_hub_export_of_a_classifier_loads_as_bert_text_classifier(source, tmp_path):
    import keras_hub

    model = zoo.from_pretrained(source["kh_bert_cls"][0])
    out = zoo.export(model, tmp_path / "out", format="keras-hub")
    hub = keras_hub.models.BertTextClassifier.from_preset(str(out))
    x = bert_inputs(model.backbone.vocabulary_size, seed=9)
    np.testing.assert_allclose(_np(hub(x)), _np(model(x)), **TOLERANCE)


def test_keras_hub_export_of_an_exact_gelu_bert_says_keras_hub_approximates(source, tmp_path):
    import keras_hub

    model = zoo.from_pretrained(source["hf_bert_cls"])  # transformers' BERT: exact GELU
    with pytest.warns(UserWarning, match="tanh-approximate GELU"):
        out = zoo.export(model, tmp_path / "out", format="keras-hub")
    hub = keras_hub.models.BertTextClassifier.from_preset(str(out))
    x = bert_inputs(model.backbone.vocabulary_size, seed=10)
    difference = np.abs(_np(hub(x)) - _np(model(x))).max()
    assert 0 < difference < 1e-3


def test_masked_lm_keras_hub_round_trip_keeps_every_weight(source, tmp_path):
    model = zoo.from_pretrained(source["hf_bert_mlm"])
    with pytest.warns(UserWarning):
        out = zoo.export(model, tmp_path / "out", format="keras-hub")
    with pytest.warns(UserWarning, match="agree to about 1e-3"):
        again = zoo.from_pretrained(out)
    assert type(again).__name__ == "BertMaskedLM"
    # The backbone comes back computing keras-hub's GELU; the weights are the same.
    named = lambda m: {w.path: w.numpy() for w in m.weights if "pooler" not in w.path}  # noqa: E731
    a, b = named(model), named(again)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # keras-hub's BertMaskedLM reads the export: the same weights, its own GELU and epsilon.
    import keras_hub

    hub = keras_hub.models.BertMaskedLM.from_preset(str(out))
    x = {**bert_inputs(model.backbone.vocabulary_size, seed=12), "mask_positions": np.array([[1, 2], [3, 4]], "int32")}
    np.testing.assert_allclose(_np(hub(x)), _np(again(x)), atol=1e-2)


# --- Without a tokenizer, and refusals -------------------------------------------------------


@pytest.mark.parametrize("format", ["huggingface", "keras-hub"])
def test_export_without_a_tokenizer_writes_the_weights_and_says_so(format, tmp_path):
    model = zoo.build("gpt-nano", task="causal_lm") if "gpt-nano" in zoo.list_presets() else None
    if model is None:
        model = zoo.models.GPTCausalLM(zoo.models.GPTBackbone(64, 1, 2, 16, max_sequence_length=16))
    with pytest.warns(UserWarning, match="tokenizer files not written: the model has no tokenizer"):
        out = zoo.export(model, tmp_path / "out", format=format)
    names = {p.name for p in out.iterdir()}
    assert "config.json" in names and not names & {"vocab.json", "merges.txt", "tokenizer.json"}
    assert ("model.safetensors" if format == "huggingface" else "model.weights.h5") in names


def test_export_refuses_what_the_format_cannot_hold(tmp_path):
    nano = zoo.models.GPTCausalLM(zoo.models.GPTBackbone(64, 1, 2, 16, max_sequence_length=16, use_bias=False))
    with pytest.raises(ValueError, match="use_bias=False"):
        zoo.export(nano, tmp_path / "a", format="huggingface")
    with pytest.raises(ValueError, match="no biases"):
        zoo.export(nano, tmp_path / "b", format="keras-hub")
    with pytest.raises(ValueError, match="format='pytorch'; expected one of .*'onnx'"):
        zoo.export(nano, tmp_path / "c", format="pytorch")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        zoo.export(nano, tmp_path / "full")
