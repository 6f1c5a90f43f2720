"""T5 and Flan-T5 checkpoints in and out.

On tiny random Hugging Face folders in t5-small's (v1.0) and
flan-t5-small's (v1.1) layouts (tests/checkpoints/t5_checkpoints.py): the
loaded model's logits equal a float64 NumPy version of transformers'
T5ForConditionalGeneration; the cached decoding step equals the full
forward pass; greedy decoding picks the reference's tokens; token ids are
T5Tokenizer's, by its rules; 4-beam search picks the hypothesis and score
of transformers' beam search over the reference; export then import is
the identity; what does not fit is refused in one line before any weight
is read.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import zoo
from tests.checkpoints import t5_checkpoints as tc
from zoo.checkpoints import CheckpointError

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.fixture(scope="module", params=["v1.0", "v1.1"])
def folder(request, tmp_path_factory):
    return tc.hf_folder(tmp_path_factory.mktemp("t5") / f"t5-tiny-{request.param}", version=request.param)


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


# --- The architecture -------------------------------------------------------------------------


def test_logits_match_the_float64_reference(model, folder):
    tensors, config = checkpoint(folder)
    x = inputs(config["vocab_size"])
    expected = tc.reference_logits(tensors, config, x["encoder_token_ids"], x["encoder_padding_mask"],
                                   x["decoder_token_ids"])
    assert np.abs(expected).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(model(x)), expected, **TOLERANCE)


def test_the_reference_sees_the_position_bias_and_the_output_scale(folder):
    """The reference (and so the test above) depends on each stack's position table, and, tied, on the rescale."""
    tensors, config = checkpoint(folder)
    x = inputs(config["vocab_size"], seed=1)
    args = (x["encoder_token_ids"], x["encoder_padding_mask"], x["decoder_token_ids"])
    base = tc.reference_logits(tensors, config, *args)
    for stack in ("encoder", "decoder"):
        name = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        changed = dict(tensors, **{name: tensors[name][::-1].copy()})
        assert np.abs(tc.reference_logits(changed, config, *args) - base).max() > 1e-3, stack


def test_the_loaded_model_is_t5s_variant(model, folder):
    _, hf = checkpoint(folder)
    config = model.config
    assert (config.position, config.normalization, config.use_bias, config.attention_scale, config.norm_first) == (
        "relative", "rms_norm", False, 1.0, True)
    assert config.tie_output == config.scale_tied_output == hf["tie_word_embeddings"]
    assert config.gated_feed_forward == hf["feed_forward_proj"].startswith("gated") and config.head_dim == hf["d_kv"]
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == (8, 20)


def test_the_cached_step_equals_the_uncached_forward(model, folder):
    x = inputs(model.vocabulary_size, seed=2)
    full = _np(model(x))
    context = model.start(keras.ops.convert_to_tensor(x["encoder_token_ids"], "int32"),
                          keras.ops.convert_to_tensor(x["encoder_padding_mask"], "int32"))
    cache, steps = model.empty_cache(2, 8), []
    for i in range(x["decoder_token_ids"].shape[1]):
        token = keras.ops.convert_to_tensor(x["decoder_token_ids"][:, i : i + 1], "int32")
        logits, cache = model.call_with_cache(token, cache, i, context)
        steps.append(_np(logits)[:, 0])
    np.testing.assert_allclose(np.stack(steps, 1), full, **TOLERANCE)


def test_greedy_decoding_equals_the_reference(model, folder):
    tensors, config = checkpoint(folder)
    for sentence in tc.SENTENCES[:2]:
        source = _np(model.tokenizer(sentence)).tolist()
        expected = tc.reference_greedy(tensors, config, source, max_new_tokens=8)
        out = zoo.generate(model, [[model.tokenizer.start_token_id]], max_new_tokens=8, source=[source],
                           stop_token_ids=[model.tokenizer.end_token_id])
        assert out.sequences[0] == expected


# --- The tokenizer ----------------------------------------------------------------------------


def test_token_ids_follow_t5_tokenizers_rules(model, folder):
    tokenizer = model.tokenizer
    for text in tc.SENTENCES:
        assert _np(tokenizer(text)).tolist() == tc.reference_ids(folder, text), text
    assert (tokenizer.pad_token_id, tokenizer.end_token_id, tokenizer.unknown_token_id, tokenizer.start_token_id) == (
        0, 1, 2, 0)
    size = tokenizer.vocabulary_size()
    assert size == model.vocabulary_size - 8
    assert tokenizer.token_to_id("<extra_id_0>") == size - 1 and tokenizer.token_to_id("<extra_id_99>") == size - 100
    assert tokenizer.detokenize(tokenizer("A man rides a bike.")) == "A man rides a bike."
    assert tokenizer.detokenize(tokenizer("A man <extra_id_3> a bike.")) == "A man a bike."  # skip_special_tokens


def test_the_keras_file_reloads_model_and_tokenizer(model, tmp_path):
    zoo.save(model, tmp_path / "t5.keras")
    again = zoo.load(tmp_path / "t5.keras")
    assert type(again.tokenizer).__name__ == "T5Tokenizer"
    text = tc.SENTENCES[-1]
    assert _np(again.tokenizer(text)).tolist() == _np(model.tokenizer(text)).tolist()
    assert again.tokenizer.start_token_id == 0
    x = inputs(model.vocabulary_size, seed=5)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))


# --- Export -----------------------------------------------------------------------------------


def test_export_then_import_is_the_identity(model, folder, tmp_path):
    exported = tmp_path / "exported"
    zoo.export(model, exported, format="huggingface")
    assert {p.name for p in exported.iterdir()} >= {"config.json", "model.safetensors", "spiece.model",
                                                    "tokenizer_config.json", "generation_config.json"}
    original, written = load_file(str(folder / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert set(written) == set(original) - {"encoder.embed_tokens.weight"}  # a copy of `shared`
    for name, value in written.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    config, source_config = (json.loads((f / "config.json").read_text()) for f in (exported, folder))
    for key in ("model_type", "vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads", "feed_forward_proj",
                "tie_word_embeddings", "relative_attention_num_buckets", "relative_attention_max_distance",
                "pad_token_id", "eos_token_id", "decoder_start_token_id"):
        assert config[key] == source_config[key], key
    assert (exported / "spiece.model").read_bytes() == (folder / "spiece.model").read_bytes()
    again = zoo.from_pretrained(exported)
    x = inputs(model.vocabulary_size, seed=4)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))


# --- Refusals ---------------------------------------------------------------------------------


def _changed_config(folder, tmp_path, **changes):
    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **changes}))
    return copy


@pytest.mark.parametrize("key, value, pattern", [
    ("num_decoder_layers", 3, "num_layers=2 and num_decoder_layers=3 differ"),
    ("feed_forward_proj", "gated-swish", "feed_forward_proj"),
])
def test_what_the_zoo_does_not_compute_is_refused(folder, tmp_path, key, value, pattern):
    with pytest.raises(CheckpointError, match=pattern) as error:
        zoo.from_pretrained(_changed_config(folder, tmp_path, **{key: value}))
    assert "\n" not in str(error.value)


def test_a_differing_copy_of_the_shared_table_is_refused(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "copy")
    weights = load_file(str(copy / "model.safetensors"))
    weights["encoder.embed_tokens.weight"] = weights["encoder.embed_tokens.weight"] + 1.0
    save_file(weights, str(copy / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="encoder.embed_tokens.weight' differs from 'shared.weight'"):
        zoo.from_pretrained(copy)


def test_a_missing_spiece_model_is_one_line(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "copy")
    (copy / "spiece.model").unlink()
    with pytest.raises(CheckpointError, match=r"spiece.model, or tokenizer.json") as error:
        zoo.from_pretrained(copy)
    assert "\n" not in str(error.value)


# --- A folder with tokenizer.json alone (T5TokenizerFast's) ------------------------------------


@pytest.fixture(scope="module")
def json_folder(tmp_path_factory):
    """flan-t5-small's layout with T5TokenizerFast's tokenizer.json of the same SentencePiece model and no
    spiece.model; the same weights as the v1.1 `folder`."""
    return tc.hf_folder(tmp_path_factory.mktemp("t5-json") / "t5-tiny-json", version="v1.1",
                        tokenizer="tokenizer.json")


@pytest.fixture(scope="module")
def spiece_folder(tmp_path_factory):
    return tc.hf_folder(tmp_path_factory.mktemp("t5-spiece") / "t5-tiny-v1.1", version="v1.1")


def test_tokenizer_json_alone_gives_t5tokenizers_ids_and_the_same_model(json_folder, spiece_folder):
    from zoo.tokenizers import HuggingFaceTokenizer

    model, reference = zoo.from_pretrained(json_folder), zoo.from_pretrained(spiece_folder)
    tokenizer = model.tokenizer
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    for text in tc.SENTENCES + ["  runs  of   spaces ", "A man <extra_id_3> a bike."]:
        assert _np(tokenizer(text)).tolist() == tc.reference_ids(spiece_folder, text), text
    assert (tokenizer.pad_token_id, tokenizer.end_token_id, tokenizer.start_token_id) == (0, 1, 0)
    assert tokenizer.vocabulary_size() == reference.tokenizer.vocabulary_size()
    assert tokenizer.detokenize(tokenizer("A man <extra_id_3> a bike.")) == "A man a bike."
    x = inputs(model.vocabulary_size, seed=6)
    np.testing.assert_array_equal(_np(model(x)), _np(reference(x)))
    sources = ["translate English to German: A man rides a bike.", "Größe über Straße – naïve"]
    assert zoo.translate(model, sources, max_length=8) == zoo.translate(reference, sources, max_length=8)


def test_a_tokenizer_json_model_exports_and_reloads(json_folder, tmp_path):
    model = zoo.from_pretrained(json_folder)
    exported = tmp_path / "exported"
    zoo.export(model, exported, format="huggingface")
    assert (exported / "tokenizer.json").is_file() and not (exported / "spiece.model").exists()
    again = zoo.from_pretrained(exported)
    text = tc.SENTENCES[-1]
    assert _np(again.tokenizer(text)).tolist() == _np(model.tokenizer(text)).tolist()
    x = inputs(model.vocabulary_size, seed=7)
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))
    zoo.save(model, tmp_path / "t5.keras")
    assert _np(zoo.load(tmp_path / "t5.keras").tokenizer(text)).tolist() == _np(model.tokenizer(text)).tolist()


def test_the_non_legacy_mode_is_read_from_tokenizer_json_or_refused(json_folder, spiece_folder, tmp_path):
    from zoo.tokenizers import HuggingFaceTokenizer

    both = shutil.copytree(spiece_folder, tmp_path / "both")
    shutil.copy(json_folder / "tokenizer.json", both / "tokenizer.json")
    assert type(zoo.from_pretrained(both).tokenizer).__name__ == "T5Tokenizer"  # legacy: spiece.model
    settings = json.loads((both / "tokenizer_config.json").read_text())
    (both / "tokenizer_config.json").write_text(json.dumps({**settings, "legacy": False}))
    assert isinstance(zoo.from_pretrained(both).tokenizer, HuggingFaceTokenizer)
    (both / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer_config.json: legacy=false.*expected a tokenizer.json") as error:
        zoo.from_pretrained(both)
    assert "\n" not in str(error.value)


def test_a_tokenizer_json_that_is_not_this_t5s_is_one_line(json_folder, tmp_path):
    from tokenizers import Tokenizer, models

    copy = _changed_config(json_folder, tmp_path, eos_token_id=5)
    with pytest.raises(CheckpointError, match=r"tokenizer.json: the tokenizer's '</s>' is id 1; expected 5") as error:
        zoo.from_pretrained(copy)
    assert "\n" not in str(error.value)
    other = tmp_path / "bpe"
    shutil.copytree(json_folder, other)
    bpe = Tokenizer(models.BPE(vocab={"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3}, merges=[], unk_token="<unk>"))
    (other / "tokenizer.json").write_text(bpe.to_str(), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"tokenizer.json: the tokenizer's model is 'BPE'; expected T5's 'Unigram'"):
        zoo.from_pretrained(other)


# --- Beam search ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ending(folder, model, tmp_path_factory):
    """The folder with `</s>`'s output row (the head's, or v1.0's shared table's) made a noisy,
    scaled copy of the row of the third token that greedy decoding picks, at the smallest scale
    that still ends greedy decoding within 4 tokens, so that beams end at several lengths."""
    tensors, config = checkpoint(folder)
    copy = tmp_path_factory.mktemp("t5-ending") / folder.name
    shutil.copytree(folder, copy)
    name = "shared.weight" if config["tie_word_embeddings"] else "lm_head.weight"
    source = _np(model.tokenizer(tc.SENTENCES[0])).tolist()
    third = tc.reference_greedy(tensors, config, source, 8)[2]
    rows = tensors[name].copy()
    noise = np.random.default_rng(3).normal(0.0, 0.3 * rows.std(), rows.shape[1])
    ending = None
    for scale in np.arange(1.6, 0.8, -0.05):
        rows[config["eos_token_id"]] = scale * rows[third] + noise
        tensors[name] = rows
        greedy = tc.reference_greedy(tensors, config, source, 8)
        if greedy[-1] != config["eos_token_id"] or len(greedy) > 4:
            break
        ending = scale
    assert ending is not None
    rows[config["eos_token_id"]] = ending * rows[third] + noise
    if config["tie_word_embeddings"] and "encoder.embed_tokens.weight" in tensors:
        tensors["encoder.embed_tokens.weight"] = rows
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    return copy


@pytest.mark.integration  # a beam search compiled for each of six models
@pytest.mark.parametrize("early_stopping", [True, False, "never"])
def test_beam_search_is_transformers(ending, early_stopping):
    """4-beam search picks the hypothesis, and its score, of transformers' beam search
    re-implemented over the float64 reference, from `decoder_start_token_id` (the pad) to
    `</s>`, for each of `early_stopping`'s three settings, with beams that end at several
    lengths."""
    from tests.checkpoints import transformers_generation as tg

    model = zoo.from_pretrained(ending)
    tensors, config = checkpoint(ending)
    settings = json.loads((ending / "generation_config.json").read_text())
    for sentence in tc.SENTENCES[:2]:
        source = _np(model.tokenizer(sentence)).tolist()
        ones = np.ones((1, len(source)))

        def reference(decoded):
            return tc.reference_logits(tensors, config, np.array([source]), ones, np.array([decoded]))[0, -1]

        expected, score = tg.beam_search(reference, settings, 12, 4, 1.0, early_stopping)
        beams = zoo.generation.beam_search(model, [[0]], 11, 4, 1.0, [1], source=[source], early_stopping=early_stopping)
        assert beams.sequences[0][0] == expected
        np.testing.assert_allclose(beams.scores[0][0], score, rtol=1e-4, atol=1e-4)
