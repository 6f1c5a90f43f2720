"""Gemma 3 text checkpoints (`gemma3_text`) in and out.

On tiny random Hugging Face folders made from their config: the loaded
model's logits equal a float64 NumPy reference of transformers'
Gemma3ForCausalLM, and its hidden states equal keras-hub's own reading of
the same folder; the token ids are the `tokenizers` package's; cached
generation past the sliding window equals the full forward pass; export
then import is the identity; what the zoo does not compute is refused in
one line. The 270M preset has transformers' parameter count.
"""

import json
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file

import zoo
from tests.checkpoints import gemma_checkpoints as gc
from tests.checkpoints.test_from_pretrained import TOLERANCE, _np
from zoo.checkpoints import CheckpointError

CASES = list(gc.CASES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma_checkpoints")
    return {name: gc.hf_folder(root / name, name, seed=i) for i, name in enumerate(CASES)}


def inputs(vocabulary_size, batch=2, length=12, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocabulary_size, (batch, length)).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


def checkpoint(folder):
    return load_file(str(folder / "model.safetensors")), json.loads((folder / "config.json").read_text())


def test_the_270m_preset_has_transformers_parameter_count():
    """transformers' count for google/gemma-3-270m's config, the tied head counted once:
    262,144 x 640 embeddings + 18 layers x 5,573,632 + the final norm's 640."""
    assert zoo.describe("gemma3-270m")["parameters"] == 268_098_176 == 262_144 * 640 + 18 * 5_573_632 + 640


@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_float64_reference(folders, name):
    lm = zoo.from_pretrained(folders[name])
    assert type(lm).__name__ == "Gemma3CausalLM"
    tensors, config = checkpoint(folders[name])
    x = inputs(config["vocab_size"])
    expected = gc.reference_logits(tensors, config, x["token_ids"])
    assert np.abs(expected).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(lm(x)), expected, **TOLERANCE)


def test_the_sliding_window_changes_the_logits(folders):
    """The reference without the window differs, so the test above sees the window."""
    tensors, config = checkpoint(folders["gemma3"])
    x = inputs(config["vocab_size"])["token_ids"]
    windowed = gc.reference_logits(tensors, config, x)
    unwindowed = gc.reference_logits(tensors, {**config, "sliding_window": 1000}, x)
    assert np.abs(windowed[:, : config["sliding_window"]] - unwindowed[:, : config["sliding_window"]]).max() < 1e-9
    assert np.abs(windowed - unwindowed).max() > 1e-3


def test_hidden_states_match_keras_hub_reading_the_same_folder(folders):
    """keras-hub's own Hugging Face converter (Gemma3Backbone), on the published models' layer pattern."""
    import keras_hub

    hub = keras_hub.models.Backbone.from_preset(str(folders["gemma3_pattern"]))
    assert type(hub).__name__ == "Gemma3Backbone"
    backbone = zoo.from_pretrained(folders["gemma3_pattern"], task=None)
    assert type(backbone).__name__ == "Gemma3Backbone"
    x = inputs(hub.vocabulary_size, seed=1)
    np.testing.assert_allclose(_np(backbone(x)), _np(hub(x)), **TOLERANCE)


def test_the_config_is_read_as_transformers_reads_it(folders):
    config = lambda name: zoo.from_pretrained(folders[name], task=None)._zoo_config  # noqa: E731
    v4, v5, pattern = config("gemma3"), config("gemma3_v5"), config("gemma3_pattern")
    assert v4["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention"]
    assert v4["head_dim"] == 16 and v4["query_pre_attention_scalar"] == 12 and v4["sliding_window"] == 4
    assert (v5["rope_theta"], v5["local_rope_theta"]) == (500000.0, 10000.0)
    assert v5["layer_types"] == ["sliding_attention", "full_attention"]
    assert pattern["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]


def test_cached_generation_past_the_window_equals_the_full_pass(folders):
    """Greedy decoding with the cache, 20 tokens past a window of 4, against the argmax of full passes."""
    lm = zoo.from_pretrained(folders["gemma3"])
    prompt = [5, 9, 17]
    out = zoo.generate(lm, [prompt], max_new_tokens=20, sampler="greedy", stop_token_ids=())
    sequence = list(prompt)
    for _ in range(20):
        logits = _np(lm({"token_ids": np.array([sequence], "int32")}))
        sequence.append(int(np.argmax(logits[0, -1])))
    assert out.sequences[0] == sequence[len(prompt):]


def test_token_ids_are_the_tokenizers_package_ids(folders):
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(folders["gemma3"] / "tokenizer.json"))
    lm = zoo.from_pretrained(folders["gemma3"])
    for sentence in gc.CORPUS[:4]:
        assert _np(lm.tokenizer(sentence)).tolist() == reference.encode(sentence).ids, sentence
    assert lm.tokenizer("the")[0] == reference.token_to_id(gc.BOS)
    ends = {reference.token_to_id(gc.EOS), reference.token_to_id(gc.END_OF_TURN)}
    assert set(lm.tokenizer.end_token_ids) == ends
    assert lm.tokenizer.detokenize(lm.tokenizer(gc.CORPUS[0])).strip() == gc.CORPUS[0]


def test_zoo_build_accepts_a_gemma_folder(folders):
    lm = zoo.build(str(folders["gemma3"]), task="causal_lm")
    assert type(lm).__name__ == "Gemma3CausalLM" and lm.tokenizer is not None


# --- Export, then import ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gemma3", "gemma3_v5"])
def test_huggingface_export_then_import_is_the_identity(folders, name, tmp_path):
    model = zoo.from_pretrained(folders[name])
    model.set_weights([w + 0.01 * np.random.default_rng(i).standard_normal(w.shape).astype(w.dtype)
                       for i, w in enumerate(model.get_weights())])
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    again = zoo.from_pretrained(out)
    assert type(again) is type(model)
    for u, v in zip(model.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(u, v)
    x = inputs(model.backbone.vocabulary_size, seed=3)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    assert again.backbone.layer_types == model.backbone.layer_types
    assert again.tokenizer.end_token_ids == model.tokenizer.end_token_ids


def test_huggingface_export_writes_the_checkpoint_it_was_loaded_from(folders, tmp_path):
    model = zoo.from_pretrained(folders["gemma3"])
    out = zoo.export(model, tmp_path / "out", format="huggingface")
    (original, original_config), written = checkpoint(folders["gemma3"]), load_file(str(out / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for key in original:
        np.testing.assert_array_equal(written[key], original[key], err_msg=key)
    config = json.loads((out / "config.json").read_text())
    for key in ("model_type", "architectures", "vocab_size", "num_key_value_heads", "head_dim", "sliding_window",
                "layer_types", "query_pre_attn_scalar", "rope_theta", "rope_local_base_freq", "rms_norm_eps"):
        assert config[key] == original_config[key], key


def test_keras_hub_export_is_refused_in_one_line(tmp_path):
    lm = zoo.build("gemma3-nano", task="causal_lm")
    with pytest.raises(ValueError, match="Hugging Face folder only"):
        zoo.export(lm, tmp_path / "out", format="keras-hub")


# --- Refusals --------------------------------------------------------------------------------


@pytest.fixture
def copy(folders, tmp_path):
    return lambda name: shutil.copytree(folders[name], tmp_path / name)


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("changes,match", [
    (dict(final_logit_softcapping=30.0), "final_logit_softcapping=30.0 is not supported"),
    (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0 is not supported"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 8.0}), "rope_scaling .* is not supported"),
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True is not supported"),
    (dict(tie_word_embeddings=False), "tie_word_embeddings=False is not supported"),
    (dict(hidden_activation="silu"), "hidden_activation='silu' is not supported"),
    (dict(architectures=["Gemma3ForSequenceClassification"]), "Gemma3ForSequenceClassification"),
])
def test_an_unsupported_config_is_refused_in_one_line(copy, changes, match):
    folder = copy("gemma3")
    edit_config(folder, **changes)
    with pytest.raises(CheckpointError, match=re.escape(str(folder / "config.json")) + ".*" + match) as error:
        zoo.from_pretrained(folder)
    assert "\n" not in str(error.value)


def test_the_multimodal_model_type_is_refused(copy):
    folder = copy("gemma3")
    edit_config(folder, model_type="gemma3")
    with pytest.raises(CheckpointError, match="model_type 'gemma3' is not supported.*'gemma3_text'"):
        zoo.from_pretrained(folder)
