"""Marian (Helsinki-NLP/opus-mt-*) checkpoints in.

On tiny random Hugging Face folders in opus-mt's layout
(tests/checkpoints/marian_checkpoints.py): the loaded model's logits equal
a float64 NumPy version of transformers' MarianMTModel; its token ids are
MarianTokenizer's, by its rules, on both sides; the `.keras` file reloads
the same model and tokenizers; a folder by `hf://` handle loads the same
model; what is missing or does not fit is refused in one line before any
weight is read.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import zoo
from tests.checkpoints import marian_checkpoints as mc
from tests.checkpoints.hub_server import HubServer, point_huggingface_hub
from zoo.checkpoints import CheckpointError
from zoo.data import MarianTokenizer

TOLERANCE = dict(rtol=1e-5, atol=2e-5)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return mc.hf_folder(tmp_path_factory.mktemp("marian") / "opus-mt-tiny-de-en")


@pytest.fixture(scope="module")
def model(folder):
    return zoo.from_pretrained(folder)


def checkpoint(folder):
    return load_file(str(folder / "model.safetensors")), json.loads((folder / "config.json").read_text())


def inputs(vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)
    source, target = rng.integers(0, vocabulary_size, (2, 9)), rng.integers(0, vocabulary_size, (2, 7))
    source_mask = np.ones((2, 9), "int32")
    source_mask[1, 6:] = 0  # a padded source
    return {"encoder_token_ids": source, "encoder_padding_mask": source_mask, "decoder_token_ids": target,
            "decoder_padding_mask": np.ones_like(target)}


def copy(folder, tmp_path, name="copy"):
    return shutil.copytree(folder, tmp_path / name)


# --- The architecture -------------------------------------------------------------------------


def test_logits_match_the_float64_reference(model, folder):
    tensors, config = checkpoint(folder)
    x = inputs(config["vocab_size"])
    expected = mc.reference_logits(tensors, config, x["encoder_token_ids"], x["encoder_padding_mask"],
                                   x["decoder_token_ids"])
    assert np.abs(expected).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(model(x)), expected, **TOLERANCE)


def test_the_loaded_model_is_marians_variant(model, folder):
    config = model.config
    assert type(model).__name__ == "EncoderDecoder"
    assert (config.position, config.activation, config.final_logits_bias, config.scale_embeddings) == (
        "sinusoidal_halves", "silu", True, True)
    assert config.layer_norm_epsilon == 1e-5 and not config.norm_first and config.share_embeddings


@pytest.mark.parametrize("change", ["interleaved", "relu", "no_bias", "no_scale"])
def test_the_reference_sees_each_marian_detail(folder, change):
    """Each detail changes the reference's logits, so the test above checks it."""
    tensors, config = checkpoint(folder)
    x = inputs(config["vocab_size"])
    args = (x["encoder_token_ids"], x["encoder_padding_mask"], x["decoder_token_ids"])
    expected = mc.reference_logits(tensors, config, *args)
    if change == "no_bias":
        tensors = {**tensors, "final_logits_bias": np.zeros_like(tensors["final_logits_bias"])}
    elif change == "no_scale":
        config = {**config, "scale_embedding": False}
    elif change == "relu":
        original, mc._swish = mc._swish, lambda v: np.maximum(v, 0)
    elif change == "interleaved":
        original_sinusoids = mc.sinusoids
        d = config["d_model"]
        order = np.argsort(np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)]))
        mc.sinusoids = lambda n, dim: original_sinusoids(n, dim)[:, order]
    try:
        changed = mc.reference_logits(tensors, config, *args)
    finally:
        if change == "relu":
            mc._swish = original
        if change == "interleaved":
            mc.sinusoids = original_sinusoids
    assert np.abs(changed - expected).max() > 1e-3


def test_tied_copies_and_position_tables_are_accepted(folder, tmp_path):
    """transformers' older files store the tied embedding under every name and the sinusoidal tables."""
    other = copy(folder, tmp_path)
    tensors, config = checkpoint(folder)
    shared = tensors["model.shared.weight"]
    tensors.update({"lm_head.weight": shared, "model.encoder.embed_tokens.weight": shared,
                    "model.decoder.embed_tokens.weight": shared,
                    "model.decoder.embed_positions.weight": tensors["model.encoder.embed_positions.weight"]})
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    x = inputs(config["vocab_size"], seed=1)
    np.testing.assert_array_equal(_np(zoo.from_pretrained(other)(x)), _np(zoo.from_pretrained(folder)(x)))


# --- The tokenizers ----------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["source", "target"])
def test_token_ids_follow_marian_tokenizers_rules(model, folder, side):
    tokenizer = model.source_tokenizer if side == "source" else model.tokenizer
    sentences = mc.SOURCE_SENTENCES + mc.TARGET_SENTENCES
    for sentence in sentences:
        assert _np(tokenizer(sentence)).tolist() == mc.reference_ids(folder, sentence, side), sentence
    assert [row.tolist() for row in tokenizer(sentences)] == [mc.reference_ids(folder, s, side) for s in sentences]
    vocabulary = json.loads((folder / "vocab.json").read_text())
    ids = _np(tokenizer("Größe 東京 🙂")).tolist()
    assert ids[-1] == vocabulary["</s>"] == tokenizer.end_token_id
    assert vocabulary["<unk>"] in ids  # 東京 and 🙂 are in no piece


def test_the_two_sides_cut_text_with_their_own_model(model):
    """source.spm and target.spm are different models: the same text gets different pieces."""
    texts = ["Zwei Hunde laufen über die Straße.", "Two dogs run across the street."]
    assert any(model.source_tokenizer.pieces(t) != model.tokenizer.pieces(t) for t in texts)


def test_special_ids_and_detokenize(model, folder):
    vocabulary = json.loads((folder / "vocab.json").read_text())
    tokenizer = model.tokenizer
    assert tokenizer.start_token_id == tokenizer.pad_token_id == vocabulary["<pad>"] == len(vocabulary) - 1
    assert tokenizer.end_token_id == 0 and tokenizer.vocabulary_size() == len(vocabulary)
    ids = [tokenizer.start_token_id] + _np(tokenizer("A man rides a bike.")).tolist()
    assert tokenizer.detokenize(ids) == "A man rides a bike."
    assert tokenizer.generation["num_beams"] == 4 and tokenizer.generation["bad_words_ids"] == [[len(vocabulary) - 1]]


def test_the_keras_file_reloads_model_and_tokenizers(model, tmp_path):
    path = tmp_path / "opus-mt.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    x = inputs(model.vocabulary_size, seed=2)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    for side in ("tokenizer", "source_tokenizer"):
        original, reloaded = getattr(model, side), getattr(again, side)
        assert isinstance(reloaded, MarianTokenizer)
        for sentence in mc.SOURCE_SENTENCES + mc.TARGET_SENTENCES:
            assert _np(reloaded(sentence)).tolist() == _np(original(sentence)).tolist()
        assert reloaded.generation == original.generation and reloaded.start_token_id == original.start_token_id


# --- By handle ----------------------------------------------------------------------------------


def test_an_hf_handle_loads_the_same_model(folder, model, tmp_path, monkeypatch):
    served = copy(folder, tmp_path, "served")
    (served / "pytorch_model.bin").write_bytes(b"not read: the weights are in model.safetensors")
    with HubServer() as hub:
        hub.commit("Helsinki-NLP/opus-mt-de-en", served)
        point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home")
        loaded = zoo.from_pretrained("hf://Helsinki-NLP/opus-mt-de-en")
        fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if "/resolve/" in path}
    assert {"source.spm", "target.spm", "vocab.json", "generation_config.json"} <= fetched
    assert "pytorch_model.bin" not in fetched
    x = inputs(model.vocabulary_size, seed=3)
    np.testing.assert_array_equal(_np(loaded(x)), _np(model(x)))
    assert _np(loaded.source_tokenizer("Ein Mann fährt Fahrrad.")).tolist() == _np(
        model.source_tokenizer("Ein Mann fährt Fahrrad.")).tolist()


# --- Refusals, each one line before any weight is read -----------------------------------------


def refused(folder, pattern):
    with pytest.raises(CheckpointError, match=pattern) as error:
        zoo.from_pretrained(folder)
    assert "\n" not in str(error.value)
    return str(error.value)


@pytest.mark.parametrize("name", ["source.spm", "target.spm", "vocab.json", "model.safetensors", "config.json"])
def test_a_missing_file_is_one_line(folder, tmp_path, name):
    other = copy(folder, tmp_path)
    (other / name).unlink()
    message = refused(other, "does not exist")
    assert name in message


def test_a_wrong_shaped_tensor_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    tensors["model.decoder.layers.1.encoder_attn.k_proj.weight"] = tensors[
        "model.decoder.layers.1.encoder_attn.k_proj.weight"][:, :-1]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, r"encoder_attn\.k_proj\.weight' has shape \(32, 31\); expected \(32, 32\)")


def test_a_missing_tensor_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    del tensors["final_logits_bias"]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, "1 tensor\\(s\\) of MarianMTModel missing, e.g. \\['final_logits_bias'\\]")


def test_an_untied_head_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    tensors["lm_head.weight"] = tensors["model.shared.weight"] + 1
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, "'lm_head.weight' differs from 'model.shared.weight'")


@pytest.mark.parametrize("key, value, pattern", [
    ("model_type", "marian_xl", "model_type 'marian_xl' is not supported"),
    ("normalize_before", True, "normalize_before=True is not supported; the zoo's Marian is post-LN"),
    ("normalize_embedding", True, "normalize_embedding=True is not supported"),
    ("decoder_layers", 3, "encoder_layers=2 and decoder_layers=3 differ"),
    ("activation_function", "tanh", "activation_function='tanh' is not supported"),
])
def test_what_the_zoo_does_not_compute_is_refused(folder, tmp_path, key, value, pattern):
    other = copy(folder, tmp_path)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, key: value}))
    refused(other, pattern)


def test_a_vocabulary_of_another_checkpoint_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    vocabulary = {"</s>": 0, "<unk>": 1, **{f"piece{i}": i + 2 for i in range(60)}, "<pad>": 62}
    (other / "vocab.json").write_text(json.dumps(vocabulary))
    refused(other, "pieces are in .*vocab.json; expected the vocabulary of the same checkpoint")


def test_a_vocabulary_without_marians_special_tokens_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    vocabulary = json.loads((other / "vocab.json").read_text())
    del vocabulary["<pad>"]
    (other / "vocab.json").write_text(json.dumps(vocabulary))
    refused(other, "vocab.json: has no '<pad>'")


def test_a_larger_vocabulary_than_the_embedding_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    vocabulary = json.loads((other / "vocab.json").read_text())
    vocabulary["extra"] = len(vocabulary) + 5
    (other / "vocab.json").write_text(json.dumps(vocabulary))
    refused(other, "the tokenizer has .* tokens but the embedding table")
