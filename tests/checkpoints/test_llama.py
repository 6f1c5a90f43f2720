"""Llama-family checkpoints (Llama, Mistral, Qwen2, Qwen3) in and out.

On tiny random Hugging Face folders: the loaded model's logits equal a
float64 NumPy reference of the architecture and keras-hub's own reading
of the same folder; the token ids are the `tokenizers` package's; export
then import is the identity in both formats, and keras-hub reads the
keras-hub export; a wrong folder gives one CheckpointError naming the file.
"""

import json
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import zoo
from tests.checkpoints import llama_checkpoints as lc
from tests.checkpoints.test_from_pretrained import TOLERANCE, _np
from zoo.checkpoints import CheckpointError

CASES = list(lc.CASES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama_checkpoints")
    return {name: lc.hf_folder(root / name, name, seed=i) for i, name in enumerate(CASES)}


def inputs(vocabulary_size, batch=2, length=12, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocabulary_size, (batch, length)).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


def checkpoint(folder):
    return load_file(str(folder / "model.safetensors")), json.loads((folder / "config.json").read_text())


# --- Logits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_float64_reference(folders, name):
    lm = zoo.from_pretrained(folders[name])
    assert type(lm).__name__ == "LlamaCausalLM"
    tensors, config = checkpoint(folders[name])
    x = inputs(config["vocab_size"])
    expected = lc.reference_logits(tensors, config, x["token_ids"])
    assert np.abs(expected).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(lm(x)), expected, **TOLERANCE)


@pytest.mark.parametrize("name", CASES)
def test_hidden_states_match_keras_hub_reading_the_same_folder(folders, name):
    """keras-hub's own Hugging Face converter (Llama3Backbone, MistralBackbone, QwenBackbone, Qwen3Backbone)."""
    import keras_hub

    hub = keras_hub.models.Backbone.from_preset(str(folders[name]))
    backbone = zoo.from_pretrained(folders[name], task=None)
    assert type(backbone).__name__ == "LlamaBackbone"
    x = inputs(hub.vocabulary_size, seed=1)
    np.testing.assert_allclose(_np(backbone(x)), _np(hub(x)), **TOLERANCE)


def test_the_config_is_read_as_transformers_reads_it(folders):
    config = lambda name: zoo.from_pretrained(folders[name], task=None)._zoo_config  # noqa: E731
    llama, mistral, qwen2, qwen3 = config("llama"), config("mistral"), config("qwen2"), config("qwen3")
    assert llama["rope_scaling"]["rope_type"] == "llama3" and llama["tie_word_embeddings"]
    assert llama["num_key_value_heads"] == 2 and not llama["attention_bias"] and not llama["query_key_norm"]
    assert mistral["max_sequence_length"] == 16  # the sliding window, smaller than max_position_embeddings
    assert qwen2["attention_bias"] and qwen2["rope_theta"] == 1e6
    assert qwen3["query_key_norm"] and qwen3["head_dim"] == 16 and not qwen3["tie_word_embeddings"]


def test_sharded_checkpoint_without_model_prefix_and_a_tied_head_copy(folders, tmp_path):
    """A `*Model` file (no `model.` prefix) in two shards, with the tied head stored beside the embedding."""
    tensors, config = checkpoint(folders["qwen2"])
    renamed = {name.removeprefix("model."): value for name, value in tensors.items()}
    renamed["lm_head.weight"] = renamed["embed_tokens.weight"]
    folder = tmp_path / "sharded"
    shutil.copytree(folders["qwen2"], folder)
    (folder / "model.safetensors").unlink()
    names = sorted(renamed)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: renamed[k] for k in keys}, str(folder / file), metadata={"format": "pt"})
    index = {"weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config["architectures"] = ["Qwen2Model"]
    (folder / "config.json").write_text(json.dumps(config))
    lm = zoo.from_pretrained(folder)
    x = inputs(config["vocab_size"], seed=2)
    np.testing.assert_allclose(_np(lm(x)), lc.reference_logits(tensors, config, x["token_ids"]), **TOLERANCE)


def test_zoo_build_accepts_a_llama_folder(folders):
    lm = zoo.build(str(folders["llama"]), task="causal_lm")
    assert type(lm).__name__ == "LlamaCausalLM" and lm.tokenizer is not None


# --- Tokenizers ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_token_ids_are_the_tokenizers_package_ids(folders, name):
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(folders[name] / "tokenizer.json"))
    lm = zoo.from_pretrained(folders[name])
    merged = 0
    for sentence in lc.SENTENCES:
        expected = reference.encode(sentence).ids
        assert _np(lm.tokenizer(sentence)).tolist() == expected, sentence
        merged += sum(i >= 256 for i in expected)
    assert merged >= 3
    assert lm.tokenizer.detokenize(lm.tokenizer(lc.SENTENCES[1])) == lc.SENTENCES[1]
    if name == "llama":  # BOS from the post-processor; generation stops at either end id
        assert lm.tokenizer(".")[0] == reference.token_to_id(lc.BEGIN)
        assert set(lm.tokenizer.end_token_ids) == {reference.token_to_id(lc.END), reference.token_to_id(lc.EOT)}


# --- Export, then import ---------------------------------------------------------------------


def perturbed(model):
    """The model as fine-tuning leaves it: every weight moved."""
    model.set_weights([w + 0.01 * np.random.default_rng(i).standard_normal(w.shape).astype(w.dtype)
                       for i, w in enumerate(model.get_weights())])
    return model


def assert_same(model, again, x):
    assert type(again) is type(model)
    a, b = model.get_weights(), again.get_weights()
    assert len(a) == len(b) > 0
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))


@pytest.mark.parametrize("name", CASES)
def test_huggingface_export_then_import_is_the_identity(folders, name, tmp_path):
    model = perturbed(zoo.from_pretrained(folders[name]))
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    again = zoo.from_pretrained(out)
    assert_same(model, again, inputs(model.backbone.vocabulary_size, seed=3))
    for sentence in lc.SENTENCES:
        assert _np(again.tokenizer(sentence)).tolist() == _np(model.tokenizer(sentence)).tolist()
    assert again.tokenizer.end_token_ids == model.tokenizer.end_token_ids
    assert again.tokenizer.start_token_id == model.tokenizer.start_token_id


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3"])
def test_huggingface_export_writes_the_checkpoint_it_was_loaded_from(folders, name, tmp_path):
    model = zoo.from_pretrained(folders[name])
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    original, written = checkpoint(folders[name])[0], load_file(str(out / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for key in original:
        np.testing.assert_array_equal(written[key], original[key], err_msg=key)
    config, original_config = json.loads((out / "config.json").read_text()), checkpoint(folders[name])[1]
    for key in ("model_type", "architectures", "vocab_size", "num_key_value_heads", "rope_theta", "rope_scaling",
                "rms_norm_eps", "tie_word_embeddings"):
        assert config[key] == original_config[key], key
    assert (out / "tokenizer.json").read_text(encoding="utf-8") == (folders[name] / "tokenizer.json").read_text(
        encoding="utf-8"
    )


def test_huggingface_export_loads_in_keras_hub_hugging_face_converter(folders, tmp_path):
    """An independent reader of transformers' names: keras-hub's converter."""
    import keras_hub

    model = perturbed(zoo.from_pretrained(folders["qwen3"]))
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    hub = keras_hub.models.Qwen3Backbone.from_preset(str(out))
    x = inputs(hub.vocabulary_size, seed=4)
    np.testing.assert_allclose(_np(hub(x)), _np(model.backbone(x)), **TOLERANCE)


@pytest.mark.parametrize("name,hub_class", [("llama_mha", "Llama3CausalLM"),
                                            ("qwen2", "QwenCausalLM"), ("qwen3", "Qwen3CausalLM")])
def test_keras_hub_export_loads_in_keras_hub_and_back(folders, name, hub_class, tmp_path):
    import keras_hub

    model = perturbed(zoo.from_pretrained(folders[name]))
    out = zoo.export(model, tmp_path / "out", format="keras-hub")
    hub = getattr(keras_hub.models, hub_class).from_preset(str(out))
    x = inputs(model.backbone.vocabulary_size, seed=5)
    np.testing.assert_allclose(_np(hub(x)), _np(model(x)), **TOLERANCE)
    again = zoo.from_pretrained(out)
    assert_same(model, again, x)
    # keras-hub's byte-pair tokenizer: the same ids, without the BOS its preprocessor adds.
    bos = [model.tokenizer.start_token_id] if name.startswith("llama") else []
    for sentence in lc.SENTENCES:
        ids = _np(model.tokenizer(sentence)).tolist()
        assert bos + _np(hub.preprocessor.tokenizer(sentence)).tolist() == ids, sentence
        assert bos + _np(again.tokenizer(sentence)).tolist() == ids, sentence


def test_a_keras_hub_mistral_preset_loads(folders, tmp_path):
    """keras-hub's MistralBackbone, saved by keras-hub: its sliding window becomes the context."""
    import keras_hub

    hub = keras_hub.models.MistralBackbone.from_preset(str(folders["mistral"]))
    hub.save_to_preset(str(tmp_path / "preset"))
    data = json.loads(lc.tokenizer_json("mistral"))
    vocabulary = {**data["model"]["vocab"], **{t["content"]: t["id"] for t in data["added_tokens"]}}
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    keras_hub.tokenizers.Llama3Tokenizer(vocabulary=vocabulary, merges=merges).save_to_preset(str(tmp_path / "preset"))
    backbone = zoo.from_pretrained(tmp_path / "preset", task=None)
    assert backbone.max_sequence_length == 16
    x = inputs(hub.vocabulary_size, seed=6)
    np.testing.assert_allclose(_np(backbone(x)), _np(hub(x)), **TOLERANCE)


def test_keras_hub_refuses_what_it_cannot_hold(folders, tmp_path):
    with pytest.raises(ValueError, match="Llama3Backbone does not save tie_word_embeddings"):
        zoo.export(zoo.from_pretrained(folders["llama"]), tmp_path / "tied", format="keras-hub")
    backbone = zoo.models.LlamaBackbone(64, 1, 4, 32, 48, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    with pytest.raises(ValueError, match="head_dim is 16.*Llama3Backbone has no head_dim"):
        zoo.export(backbone, tmp_path / "a", format="keras-hub")
    scaled = zoo.models.LlamaBackbone(64, 1, 4, 32, 48, attention_bias=True, rope_scaling=lc.LLAMA3_SCALING)
    with pytest.raises(ValueError, match="QwenBackbone has no llama3 rope_scaling"):
        zoo.export(scaled, tmp_path / "b", format="keras-hub")


def test_export_without_a_tokenizer_says_so(tmp_path):
    lm = zoo.build("llama-nano", task="causal_lm")
    with pytest.warns(UserWarning, match="tokenizer files not written: the model has no tokenizer"):
        out = zoo.export(lm, tmp_path / "out", format="huggingface")
    assert json.loads((out / "config.json").read_text())["model_type"] in ("llama", "qwen2", "qwen3")


# --- Refusals --------------------------------------------------------------------------------


def raises_naming(path, match=""):
    return pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*" + match)


@pytest.fixture
def copy(folders, tmp_path):
    return lambda name: shutil.copytree(folders[name], tmp_path / name)


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("changes,match", [
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling of type 'yarn' is not supported"),
    (dict(rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling of type 'linear' is not supported"),
    (dict(attention_bias=True), "attention_bias=True is not supported; it puts a bias on o_proj"),
    (dict(hidden_act="gelu"), "hidden_act='gelu' is not supported"),
    (dict(architectures=["LlamaForSequenceClassification"]), "LlamaForSequenceClassification"),
])
def test_an_unsupported_config_is_refused_in_one_line(copy, changes, match):
    folder = copy("llama")
    edit_config(folder, **changes)
    with raises_naming(folder / "config.json", match) as error:
        zoo.from_pretrained(folder)
    assert "\n" not in str(error.value)


def test_qwen_sliding_window_layers_are_refused(copy):
    folder = copy("qwen2")
    edit_config(folder, use_sliding_window=True)
    with raises_naming(folder / "config.json", "use_sliding_window=True is not supported"):
        zoo.from_pretrained(folder)


def test_a_missing_or_misshapen_tensor_is_refused(copy):
    folder = copy("qwen3")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with raises_naming(folder / "model.safetensors", r"1 tensor.* missing.*layers.1.self_attn.k_norm.weight"):
        zoo.from_pretrained(folder)
    folder = copy("llama")
    edit_config(folder, num_key_value_heads=4)
    with raises_naming(folder / "model.safetensors", r"'model.layers.0.self_attn.k_proj.weight' has shape \(16, 32\); "
                       r"expected \(32, 32\)"):
        zoo.from_pretrained(folder)


def test_an_untied_copy_of_a_tied_head_is_refused(copy):
    folder = copy("qwen2")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] + 1.0
    save_file(tensors, str(folder / "model.safetensors"))
    with raises_naming(folder / "model.safetensors", "'lm_head.weight' differs"):
        zoo.from_pretrained(folder)


def test_a_missing_or_too_large_tokenizer_is_refused(copy):
    folder = copy("llama")
    (folder / "tokenizer.json").unlink()
    with raises_naming(folder / "tokenizer.json", "does not exist"):
        zoo.from_pretrained(folder)
    folder = copy("qwen2")
    edit_config(folder, vocab_size=lc.tokenizer_size("qwen2") - 1)
    with raises_naming(folder / "tokenizer.json", "tokens but the embedding table"):
        zoo.from_pretrained(folder)
