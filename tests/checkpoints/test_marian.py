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
from tests.checkpoints import transformers_generation as tg
from tests.checkpoints.hub_server import HubServer, point_huggingface_hub
from zoo.checkpoints import CheckpointError
from zoo.tokenizers import MarianTokenizer

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


# --- Decoding as the checkpoint says ------------------------------------------------------------


def test_cached_greedy_decoding_equals_the_uncached_reference(model, folder):
    """The engine's cached greedy steps pick the tokens of the float64 reference's full passes,
    `<pad>` (bad_words_ids) never among them."""
    tensors, config = checkpoint(folder)
    tokenizer = model.tokenizer
    for sentence in mc.SOURCE_SENTENCES[:3]:
        source = _np(model.source_tokenizer(sentence)).tolist()
        expected = mc.reference_greedy(tensors, config, source, max_length=13, force_end=False)
        out = zoo.generate(model, [[tokenizer.start_token_id]], max_new_tokens=12, source=[source],
                           stop_token_ids=[tokenizer.end_token_id], suppress_token_ids=[tokenizer.pad_token_id])
        assert out.sequences[0] == expected
        assert tokenizer.pad_token_id not in out.sequences[0]


def test_pad_is_chosen_unless_suppressed(model, folder):
    """The test above sees the suppression: with `<pad>`'s final bias raised, greedy picks it
    unless it is suppressed."""
    tensors, config = checkpoint(folder)
    pad = model.tokenizer.pad_token_id
    source = _np(model.source_tokenizer("Ein Mann fährt Fahrrad.")).tolist()
    bias = model.output_bias.bias
    original = _np(bias)
    try:
        bias.assign(np.where(np.arange(len(original)) == pad, 100.0, original).astype("float32"))
        free = zoo.generate(model, [[pad]], max_new_tokens=3, source=[source])
        kept = zoo.generate(model, [[pad]], max_new_tokens=3, source=[source], suppress_token_ids=[pad])
        beams = zoo.generation.beam_search(model, [[pad]], 3, num_beams=3, source=[source], suppress_token_ids=[pad])
    finally:
        bias.assign(original)
    assert free.sequences[0] == [pad] * 3
    assert pad not in kept.sequences[0] and all(pad not in hypothesis for hypothesis in beams.sequences[0])


def test_beam_hypotheses_are_scored_as_the_uncached_reference(model, folder):
    """Each of the 4 cached beams' scores is its float64 log-probability over its length ** penalty."""
    tensors, config = checkpoint(folder)
    tokenizer = model.tokenizer
    source = _np(model.source_tokenizer("Zwei Hunde laufen über die Straße.")).tolist()
    beams = zoo.generation.beam_search(model, [[tokenizer.start_token_id]], 8, num_beams=4, length_penalty=1.0,
                                       stop_token_ids=[tokenizer.end_token_id], source=[source],
                                       suppress_token_ids=[tokenizer.pad_token_id], renormalize_logits=True)
    assert len(beams.sequences[0]) == 4
    for hypothesis, score in zip(beams.sequences[0], beams.scores[0]):
        expected = mc.log_probability(tensors, config, source, hypothesis) / len(hypothesis)
        np.testing.assert_allclose(score, expected, rtol=1e-4, atol=1e-4)
    greedy = mc.reference_greedy(tensors, config, source, max_length=9, force_end=False)
    assert beams.scores[0][0] >= mc.log_probability(tensors, config, source, greedy) / len(greedy) - 1e-4


def test_translate_follows_the_generation_config(model, folder):
    """zoo.translate decodes as generation_config.json says (4 beams, max_length 64, `<pad>`
    banned, `</s>` forced last, logits renormalized): transformers' beam search re-implemented
    over the float64 reference, detokenized before `</s>`; with one beam, its greedy search."""
    tokenizer = model.tokenizer
    tensors, config = checkpoint(folder)
    settings = json.loads((folder / "generation_config.json").read_text())
    sentences = ["Ein Mann fährt Fahrrad.", "Die Kinder spielen im Garten."]

    def reference(sentence):
        source = _np(model.source_tokenizer(sentence)).tolist()
        ones = np.ones((1, len(source)))
        return lambda decoded: mc.reference_logits(tensors, config, np.array([source]), ones, np.array([decoded]))[0, -1]

    for sentence, translation in zip(sentences, zoo.translate(model, sentences)):
        best, _ = tg.beam_search(reference(sentence), settings, 64, 4, 1.0, False)
        assert translation == tokenizer.detokenize(best[:-1] if best[-1] == 0 else best)
    expected = tg.greedy(reference(sentences[0]), settings, 9)
    assert zoo.translate(model, sentences[:1], num_beams=1, max_length=8) == [
        tokenizer.detokenize([t for t in expected if t != 0])]


def test_zoo_translate_reads_a_checkpoint_by_handle(folder, model, tmp_path, monkeypatch, capsys):
    from recipes import cli

    sentence = "Ein Mann fährt Fahrrad."
    with HubServer() as hub:
        hub.commit("Helsinki-NLP/opus-mt-de-en", folder)
        point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home")
        assert cli.main(["translate", "hf://Helsinki-NLP/opus-mt-de-en", sentence, "--beam-size", "2"]) == 0
    assert capsys.readouterr().out == zoo.translate(model, [sentence], num_beams=2)[0] + "\n"
    assert cli.main(["translate", str(folder), sentence]) == 0
    assert capsys.readouterr().out == zoo.translate(model, [sentence])[0] + "\n"


# --- Out, and back in ----------------------------------------------------------------------------


def test_export_then_import_is_the_identity(model, folder, tmp_path):
    exported = tmp_path / "exported"
    zoo.export(model, exported, format="huggingface")
    assert {p.name for p in exported.iterdir()} >= {"config.json", "model.safetensors", "source.spm", "target.spm",
                                                    "vocab.json", "tokenizer_config.json", "generation_config.json"}
    original, written = load_file(str(folder / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert set(written) == set(original) - {"model.encoder.embed_positions.weight"}  # the tables are computed
    for name, value in written.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    config = json.loads((exported / "config.json").read_text())
    source_config = json.loads((folder / "config.json").read_text())
    for key in ("model_type", "vocab_size", "d_model", "encoder_layers", "decoder_ffn_dim", "activation_function",
                "scale_embedding", "pad_token_id", "decoder_start_token_id", "max_position_embeddings"):
        assert config[key] == source_config[key], key
    assert (exported / "source.spm").read_bytes() == (folder / "source.spm").read_bytes()
    assert (exported / "target.spm").read_bytes() == (folder / "target.spm").read_bytes()
    again = zoo.from_pretrained(exported)
    x = inputs(model.vocabulary_size, seed=4)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    assert again.tokenizer.generation["num_beams"] == 4
    assert _np(again.source_tokenizer("Größe über Straße")).tolist() == _np(model.source_tokenizer("Größe über Straße")).tolist()


def test_the_papers_model_is_not_written_as_marian(tmp_path):
    with pytest.raises(ValueError, match="not a Marian model: position='sinusoidal'"):
        zoo.export(zoo.build("transformer-tiny"), tmp_path / "paper", format="huggingface")


def test_separate_encoder_and_decoder_tables(tmp_path):
    """share_encoder_decoder_embeddings=False: the encoder's table and the decoder's (tied to the output)."""
    folder = mc.hf_folder(tmp_path / "separate", seed=5, config_changes={"share_encoder_decoder_embeddings": False})
    model = zoo.from_pretrained(folder)
    assert not model.config.share_embeddings
    tensors, config = checkpoint(folder)
    assert "model.shared.weight" not in tensors
    x = inputs(config["vocab_size"], seed=5)
    expected = mc.reference_logits(tensors, config, x["encoder_token_ids"], x["encoder_padding_mask"],
                                   x["decoder_token_ids"])
    np.testing.assert_allclose(_np(model(x)), expected, **TOLERANCE)
    exported = tmp_path / "exported"
    zoo.export(model, exported, format="huggingface")
    written = load_file(str(exported / "model.safetensors"))
    assert {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"} <= set(written)
    np.testing.assert_array_equal(_np(zoo.from_pretrained(exported)(x)), _np(model(x)))
