"""BART (facebook/bart-base, facebook/bart-large-cnn) checkpoints in and out.

On tiny random Hugging Face folders in bart-large-cnn's layout
(tests/checkpoints/bart_checkpoints.py): the loaded model's logits equal a
float64 NumPy version of transformers' BartForConditionalGeneration; its
token ids are BartTokenizer's, by GPT-2's byte-level BPE rules, from
tokenizer.json or from vocab.json and merges.txt; decoding starts at `</s>`
with `<s>` forced next; export then import is the identity; what is
missing or does not fit is refused in one line before any weight is read.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import zoo
from tests.checkpoints import bart_checkpoints as bc
from tests.checkpoints import transformers_generation as tg
from tests.checkpoints.hub_server import HubServer, point_huggingface_hub
from zoo.checkpoints import CheckpointError
from zoo.tokenizers import HuggingFaceTokenizer

TOLERANCE = dict(rtol=1e-5, atol=1e-5)
PROMPT = [2, 0]  # decoder_start_token_id `</s>`, then forced_bos_token_id `<s>`


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return bc.hf_folder(tmp_path_factory.mktemp("bart") / "bart-tiny-cnn")


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


def reference(folder, x, tensors=None, config=None):
    stored, stored_config = checkpoint(folder)
    return bc.reference_logits(tensors or stored, config or stored_config, x["encoder_token_ids"],
                               x["encoder_padding_mask"], x["decoder_token_ids"])


def copy(folder, tmp_path, name="copy"):
    return shutil.copytree(folder, tmp_path / name)


def source_ids(model, text):
    return _np(model.tokenizer(text)).tolist()


# --- The architecture -------------------------------------------------------------------------


def test_logits_match_the_float64_reference(model, folder):
    x = inputs(model.vocabulary_size)
    expected = reference(folder, x)
    assert np.abs(expected).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(model(x)), expected, **TOLERANCE)


def test_the_loaded_model_is_barts_variant(model):
    config = model.config
    assert type(model).__name__ == "EncoderDecoder"
    assert (config.position, config.position_offset, config.share_embeddings, config.share_positions) == (
        "learned", 2, True, False)
    assert (config.layernorm_embedding, config.activation, config.final_logits_bias, config.scale_embeddings) == (
        True, "gelu", True, False)
    assert config.layer_norm_epsilon == 1e-5 and not config.norm_first and config.tie_output
    table = model.encoder_embedding.position_embedding.position_embeddings
    assert tuple(table.shape) == (bc.MAX_POSITIONS + 2, 32)  # the table whole, rows 0 and 1 included
    assert model.encoder_embedding.token_embedding is model.decoder_embedding.token_embedding


@pytest.mark.parametrize("change", ["no_offset", "no_embedding_norm", "tanh_gelu", "no_bias", "scaled"])
def test_the_reference_sees_each_bart_detail(folder, monkeypatch, change):
    """Each detail changes the reference's logits, so the test above checks it."""
    tensors, config = checkpoint(folder)
    x = inputs(config["vocab_size"])
    expected = reference(folder, x)
    if change == "no_offset":
        monkeypatch.setattr(bc, "POSITION_OFFSET", 0)
    elif change == "no_embedding_norm":
        monkeypatch.setattr(bc, "embedding_norm", lambda v, w, p: v)
    elif change == "tanh_gelu":
        monkeypatch.setattr(bc, "gelu", lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3))))
    elif change == "no_bias":
        tensors = {**tensors, "final_logits_bias": np.zeros_like(tensors["final_logits_bias"])}
    elif change == "scaled":
        config = {**config, "scale_embedding": True}
    changed = reference(folder, x, tensors, config)
    assert np.abs(changed - expected).max() > 1e-4


def test_tied_copies_are_accepted(folder, tmp_path):
    """Files that store the shared table under every tied name load the same model."""
    other = copy(folder, tmp_path)
    tensors, config = checkpoint(folder)
    shared = tensors["model.shared.weight"]
    tensors.update({"lm_head.weight": shared, "model.encoder.embed_tokens.weight": shared,
                    "model.decoder.embed_tokens.weight": shared})
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    x = inputs(config["vocab_size"], seed=1)
    np.testing.assert_allclose(_np(zoo.from_pretrained(other)(x)), reference(folder, x), **TOLERANCE)


def test_a_bart_model_file_loads(folder, tmp_path):
    """bart-base's `BartModel` layout: no "model." prefix, no `final_logits_bias` (transformers' zeros)."""
    other = copy(folder, tmp_path)
    tensors, config = checkpoint(folder)
    bare = {name.removeprefix("model."): value for name, value in tensors.items() if name != "final_logits_bias"}
    save_file(bare, str(other / "model.safetensors"), metadata={"format": "pt"})
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["BartModel"]}))
    loaded = zoo.from_pretrained(other)
    x = inputs(config["vocab_size"], seed=2)
    zero_bias = {**tensors, "final_logits_bias": np.zeros_like(tensors["final_logits_bias"])}
    np.testing.assert_allclose(_np(loaded(x)), reference(folder, x, zero_bias), **TOLERANCE)


# --- The tokenizer ------------------------------------------------------------------------------


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.json and merges.txt"])
def test_token_ids_follow_bart_tokenizers_rules(model, folder, tmp_path, files):
    tokenizer = model.tokenizer
    if files != "tokenizer.json":
        other = copy(folder, tmp_path)
        (other / "tokenizer.json").unlink()
        tokenizer = zoo.from_pretrained(other).tokenizer
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    for text in bc.TEXTS:
        ids = _np(tokenizer(text)).tolist()
        assert ids == bc.reference_ids(folder, text), text
        assert tokenizer.detokenize(ids) == text == bc.reference_text(folder, ids)
    assert [row.tolist() for row in tokenizer(bc.TEXTS)] == [bc.reference_ids(folder, t) for t in bc.TEXTS]
    merged = bc.reference_ids(folder, "Grüße aus München")
    assert len(merged) < len("Grüße aus München".encode("utf-8")) + 2  # the merges apply, across UTF-8 bytes
    assert (tokenizer.start_token_id, tokenizer.pad_token_id, tokenizer.end_token_id) == (0, 1, 2)
    assert tokenizer.generation["forced_bos_token_id"] == 0 and tokenizer.generation["decoder_start_token_id"] == 2


def test_the_keras_file_reloads_model_and_tokenizer(model, tmp_path):
    path = tmp_path / "bart.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    assert again.config == model.config
    assert again.encoder_embedding.token_embedding is again.decoder_embedding.token_embedding
    x = inputs(model.vocabulary_size, seed=3)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    for text in bc.TEXTS:
        assert _np(again.tokenizer(text)).tolist() == _np(model.tokenizer(text)).tolist()
    assert again.tokenizer.generation == model.tokenizer.generation


# --- Refusals, each one line before any weight is read ------------------------------------------


@pytest.fixture
def no_weight_read(monkeypatch):
    from zoo.checkpoints import huggingface

    def read(self, name):
        raise AssertionError(f"{name} was read before the refusal")

    monkeypatch.setattr(huggingface.Tensors, "get", read)


def refused(folder, pattern):
    with pytest.raises(CheckpointError, match=pattern) as error:
        zoo.from_pretrained(folder)
    assert "\n" not in str(error.value)
    return str(error.value)


@pytest.mark.parametrize("names", [("config.json",), ("model.safetensors",), ("tokenizer.json", "vocab.json")])
def test_a_missing_file_is_one_line(folder, tmp_path, no_weight_read, names):
    other = copy(folder, tmp_path)
    for name in names:
        (other / name).unlink()
    assert names[-1] in refused(other, "does not exist")


def test_a_missing_tensor_is_refused(folder, tmp_path, no_weight_read):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    del tensors["model.decoder.layernorm_embedding.weight"]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, r"1 tensor\(s\) of BartForConditionalGeneration missing, e.g. "
                   r"\['model.decoder.layernorm_embedding.weight'\]")


def test_a_position_table_without_the_offset_is_refused(folder, tmp_path, no_weight_read):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    tensors["model.encoder.embed_positions.weight"] = tensors["model.encoder.embed_positions.weight"][2:]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, r"'model.encoder.embed_positions.weight' has shape \(64, 32\); expected \(66, 32\)")


def test_an_untied_head_is_refused(folder, tmp_path):
    other = copy(folder, tmp_path)
    tensors, _ = checkpoint(folder)
    tensors["lm_head.weight"] = tensors["model.shared.weight"] + 1
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    refused(other, "'lm_head.weight' differs from 'model.shared.weight'")


@pytest.mark.parametrize("key, value, pattern", [
    ("model_type", "mbart", "model_type 'mbart' is not supported; expected .*'bart'"),
    ("architectures", ["BartForSequenceClassification"], "architecture 'BartForSequenceClassification' is not "
                                                          "supported for model_type 'bart'"),
    ("normalize_before", True, "normalize_before=True is not supported; the zoo's BART is post-LN"),
    ("normalize_embedding", False, "normalize_embedding=False is not supported; BART has a LayerNorm"),
    ("extra_pos_embeddings", 0, "extra_pos_embeddings=0 is not supported"),
    ("decoder_layers", 3, "encoder_layers=2 and decoder_layers=3 differ"),
    ("activation_function", "tanh", "activation_function='tanh' is not supported"),
    ("tie_word_embeddings", False, "tie_word_embeddings=False is not supported"),
])
def test_what_the_zoo_does_not_compute_is_refused(folder, tmp_path, no_weight_read, key, value, pattern):
    other = copy(folder, tmp_path)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, key: value}))
    refused(other, pattern)


def test_a_vocabulary_larger_than_the_embedding_is_refused(folder, tmp_path, no_weight_read):
    """Two ids past the table: `<mask>` (special, allowed) and the last merge's token (not)."""
    other = copy(folder, tmp_path)
    tensors, config = checkpoint(folder)
    size = config["vocab_size"] - 2
    tensors["model.shared.weight"] = tensors["model.shared.weight"][:size]
    tensors["final_logits_bias"] = tensors["final_logits_bias"][:, :size]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": size}))
    refused(other, f"tokenizer.json: the tokenizer has {size + 2} tokens but the embedding table .* has {size} rows")


def test_special_tokens_past_the_table_are_accepted(folder, tmp_path):
    """bart-large-cnn's 50,264-row table has no row for `<mask>` (50264): it loads without it (the
    literal text `<mask>` is then plain text), with the same ids for all other text, and exports back."""
    other = copy(folder, tmp_path)
    tensors, config = checkpoint(folder)
    size = config["vocab_size"] - 1
    tensors["model.shared.weight"] = tensors["model.shared.weight"][:size]
    tensors["final_logits_bias"] = tensors["final_logits_bias"][:, :size]
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": size}))
    loaded = zoo.from_pretrained(other)
    assert loaded.vocabulary_size == loaded.tokenizer.vocabulary_size() == size
    for text in bc.TEXTS:
        assert _np(loaded.tokenizer(text)).tolist() == bc.reference_ids(folder, text)
    zoo.export(loaded, tmp_path / "exported", format="huggingface")
    assert "<mask>" not in json.loads((tmp_path / "exported" / "vocab.json").read_text())
    assert zoo.from_pretrained(tmp_path / "exported").vocabulary_size == size


def test_a_vocab_json_of_another_tokenizer_is_refused(folder, tmp_path, no_weight_read):
    other = copy(folder, tmp_path)
    vocabulary = json.loads((other / "vocab.json").read_text())
    tokens = sorted(vocabulary, key=vocabulary.get)
    tokens[10], tokens[11] = tokens[11], tokens[10]
    (other / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}, ensure_ascii=False))
    refused(other, r"vocab.json: 2 token\(s\) with other ids than in tokenizer.json")


def test_special_ids_other_than_the_configs_are_refused(folder, tmp_path, no_weight_read):
    other = copy(folder, tmp_path)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "pad_token_id": 3}))
    (other / "generation_config.json").unlink()
    refused(other, "tokenizer.json: the tokenizer's '<pad>' is id 1; expected 3, config.json's pad_token_id")


def test_vocab_json_without_barts_special_tokens_is_refused(folder, tmp_path, no_weight_read):
    other = copy(folder, tmp_path)
    (other / "tokenizer.json").unlink()
    vocabulary = json.loads((other / "vocab.json").read_text())
    del vocabulary["<pad>"]
    (other / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    refused(other, "vocab.json: has no '<pad>'")


# --- Decoding as the checkpoint says ------------------------------------------------------------


def test_cached_greedy_decoding_equals_the_uncached_reference(model, folder):
    """The decoder starts at `</s>`, `<s>` forced next: the engine's cached greedy steps after that
    prompt pick the tokens of the float64 reference's full passes."""
    tensors, config = checkpoint(folder)
    for text in bc.TEXTS[:2]:
        source = source_ids(model, text)
        expected = bc.reference_greedy(tensors, config, source, max_length=14)
        out = zoo.generate(model, [PROMPT], max_new_tokens=12, source=[source], stop_token_ids=[2])
        assert out.sequences[0] == expected


def test_beam_hypotheses_are_scored_as_the_uncached_reference(model, folder):
    """Each of the 4 cached beams' scores is its float64 log-probability over its length ** 2.0."""
    tensors, config = checkpoint(folder)
    source = source_ids(model, bc.TEXTS[1])
    beams = zoo.generation.beam_search(model, [PROMPT], 8, num_beams=4, length_penalty=2.0, stop_token_ids=[2],
                                       source=[source])
    assert len(beams.sequences[0]) == 4
    for hypothesis, score in zip(beams.sequences[0], beams.scores[0]):
        expected = bc.log_probability(tensors, config, source, PROMPT, hypothesis) / len(hypothesis) ** 2.0
        np.testing.assert_allclose(score, expected, rtol=1e-4, atol=1e-4)


def next_logits(folder, source, end_boost=0.0):
    """The float64 reference's logits of the next token after a decoder's tokens, `</s>`'s
    final bias raised by `end_boost`."""
    tensors, config = checkpoint(folder)
    tensors["final_logits_bias"] = tensors["final_logits_bias"] + end_boost * (np.arange(config["vocab_size"]) == 2)
    ones = np.ones((1, len(source)))
    return lambda decoded: bc.reference_logits(tensors, config, np.array([source]), ones, np.array([decoded]))[0, -1]


@pytest.mark.parametrize("end_boost", [0.0, 8.5, 9.0, 9.5, 10.0])
@pytest.mark.parametrize("num_beams, early_stopping", [(4, True), (4, False), (4, "never"), (1, True)])
def test_beam_search_with_the_length_controls_is_transformers(model, folder, num_beams, early_stopping, end_boost):
    """beam_search with bart-large-cnn's controls (min_length 4, no_repeat_ngram_size 3, `<s>`
    forced first, `</s>` forced at max_length 24) picks the hypothesis, and its score, of
    transformers' beam search re-implemented over the float64 reference; one beam with
    early_stopping True is transformers' greedy search. `</s>`'s final bias raised makes the
    beams stop at different lengths, before and after min_length."""
    settings = bc.generation_config()
    source = source_ids(model, bc.TEXTS[1])
    bias = model.output_bias.bias
    original = np.asarray(keras.ops.convert_to_numpy(bias))
    try:
        bias.assign(original + (end_boost * (np.arange(len(original)) == 2)).astype("float32"))
        beams = zoo.generation.beam_search(
            model, [[2]], 23, num_beams, 2.0, [2], source=[source], min_new_tokens=3, no_repeat_ngram_size=3,
            early_stopping=early_stopping, forced_first_token_id=0, forced_stop_token_id=2)
    finally:
        bias.assign(original)
    reference = next_logits(folder, source, end_boost)
    expected, score = tg.beam_search(reference, settings, 24, num_beams, 2.0, early_stopping)
    assert beams.sequences[0][0] == expected
    np.testing.assert_allclose(beams.scores[0][0], score, rtol=1e-4, atol=1e-4)
    if num_beams == 1:
        assert expected == tg.greedy(reference, settings, 24)


def test_translate_follows_the_generation_config(model, folder):
    """zoo.translate decodes as generation_config.json says (4 beams, length_penalty 2.0,
    max_length 24, min_length 4, no_repeat_ngram_size 3, early_stopping, `<s>` forced first and
    `</s>` last): transformers' beam search, detokenized between `<s>` and `</s>`; with one
    beam, its greedy search."""
    settings = bc.generation_config()
    for text, summary in zip(bc.TEXTS[:2], zoo.translate(model, bc.TEXTS[:2])):
        new, _ = tg.beam_search(next_logits(folder, source_ids(model, text)), settings, 24, 4, 2.0, True)
        assert summary == bc.reference_text(folder, new[1:-1] if new[-1] == 2 else new[1:])
    new = tg.greedy(next_logits(folder, source_ids(model, bc.TEXTS[0])), {**settings, "max_length": 9}, 9)
    assert zoo.translate(model, bc.TEXTS[:1], num_beams=1, max_length=8) == [
        bc.reference_text(folder, new[1:-1] if new[-1] == 2 else new[1:])]


def test_zoo_translate_reads_a_checkpoint_by_handle(folder, model, tmp_path, monkeypatch, capsys):
    from recipes import cli

    text = bc.TEXTS[0]
    with HubServer() as hub:
        hub.commit("facebook/bart-tiny-cnn", folder)
        point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home")
        assert cli.main(["translate", "hf://facebook/bart-tiny-cnn", text, "--beam-size", "2"]) == 0
        fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if "/resolve/" in path}
    assert {"tokenizer.json", "vocab.json", "merges.txt", "generation_config.json"} <= fetched
    assert capsys.readouterr().out == zoo.translate(model, [text], num_beams=2)[0] + "\n"


# --- Out, and back in ----------------------------------------------------------------------------


def test_export_then_import_is_the_identity(model, folder, tmp_path):
    exported = tmp_path / "exported"
    zoo.export(model, exported, format="huggingface")
    assert {p.name for p in exported.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json", "vocab.json",
                                                    "merges.txt", "tokenizer_config.json", "generation_config.json"}
    original, written = load_file(str(folder / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert set(written) == set(original)
    for name, value in written.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    config, source_config = (json.loads((f / "config.json").read_text()) for f in (exported, folder))
    for key in ("model_type", "architectures", "vocab_size", "d_model", "encoder_layers", "decoder_ffn_dim",
                "activation_function", "scale_embedding", "max_position_embeddings", "pad_token_id", "bos_token_id",
                "eos_token_id", "decoder_start_token_id", "forced_eos_token_id"):
        assert config[key] == source_config[key], key
    assert json.loads((exported / "vocab.json").read_text()) == json.loads((folder / "vocab.json").read_text())
    assert (exported / "merges.txt").read_text() == (folder / "merges.txt").read_text()
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation == json.loads((folder / "generation_config.json").read_text())
    assert json.loads((exported / "tokenizer_config.json").read_text())["tokenizer_class"] == "BartTokenizer"
    again = zoo.from_pretrained(exported)
    x = inputs(model.vocabulary_size, seed=4)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    (exported / "tokenizer.json").unlink()  # the slow tokenizer's files alone give the same ids
    for text in bc.TEXTS:
        assert _np(zoo.from_pretrained(exported).tokenizer(text)).tolist() == bc.reference_ids(folder, text)


def test_a_model_without_barts_flags_is_not_written_as_bart(tmp_path):
    with pytest.raises(ValueError, match="not a BART model: share_positions=True; BART has a position table per stack"):
        zoo.export(zoo.build("bart-tiny", share_positions=True), tmp_path / "shared", format="huggingface")
