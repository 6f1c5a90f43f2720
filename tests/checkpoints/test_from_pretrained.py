"""`zoo.from_pretrained` on tiny random checkpoints: the same logits as the
reference implementation, and the same token ids as an independent tokenizer."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import zoo
from tests.checkpoints import stand_ins as ck

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def _np(x):
    import keras

    return keras.ops.convert_to_numpy(x)


def gpt_inputs(vocabulary_size, batch=2, length=12, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocabulary_size, (batch, length)).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


def bert_inputs(vocabulary_size, lengths=(12, 7), length=12, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.array([[1] * n + [0] * (length - n) for n in lengths], "int32")
    segments = np.array([[0] * (n // 2) + [1] * (length - n // 2) for n in lengths], "int32") * mask
    return {
        "token_ids": (rng.integers(5, vocabulary_size, (len(lengths), length)) * mask).astype("int32"),
        "segment_ids": segments,
        "padding_mask": mask,
    }


@pytest.fixture(scope="module")
def folders(checkpoint_folders):
    return checkpoint_folders


def _hf(folder):
    return load_file(str(folder / "model.safetensors")), json.loads((folder / "config.json").read_text())


# --- Hugging Face folders against the float64 reference ------------------------------


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_gpt2_bare"])
def test_hf_gpt2_logits_match_float64_reference(folders, name):
    lm = zoo.from_pretrained(folders[name])
    assert type(lm).__name__ == "GPTCausalLM"
    tensors, config = _hf(folders[name])
    x = gpt_inputs(config["vocab_size"])
    reference = ck.gpt2_reference_logits(tensors, config, x["token_ids"])
    assert np.abs(reference).max() > 1.0  # random weights reach the logits
    np.testing.assert_allclose(_np(lm(x)), reference, **TOLERANCE)


def test_hf_gpt2_hidden_states_match_keras_hub_loader(folders):
    """keras-hub's own Hugging Face converter reads the same folder to the same hidden states."""
    import keras_hub

    hub = keras_hub.models.GPT2Backbone.from_preset(str(folders["hf_gpt2"]))
    lm = zoo.from_pretrained(folders["hf_gpt2"], task=None)
    x = gpt_inputs(hub.vocabulary_size, seed=3)
    np.testing.assert_allclose(_np(lm(x)), _np(hub(x)), **TOLERANCE)


def test_hf_bert_masked_lm_logits_match_float64_reference(folders):
    model = zoo.from_pretrained(folders["hf_bert_mlm"])
    assert type(model).__name__ == "BertMaskedLM"
    tensors, config = _hf(folders["hf_bert_mlm"])
    x = bert_inputs(config["vocab_size"])
    positions = np.array([[1, 4, 9], [0, 2, 6]], "int32")
    _, _, heads = ck.bert_reference(tensors, config, x["token_ids"], x["segment_ids"], x["padding_mask"])
    expected = np.take_along_axis(heads["masked_lm"], positions[:, :, None], axis=1)
    np.testing.assert_allclose(_np(model({**x, "mask_positions": positions})), expected, **TOLERANCE)


def test_hf_bert_classifier_logits_match_float64_reference(folders):
    model = zoo.from_pretrained(folders["hf_bert_cls"])
    assert type(model).__name__ == "BertClassifier" and model.num_classes == 3
    tensors, config = _hf(folders["hf_bert_cls"])
    x = bert_inputs(config["vocab_size"], seed=1)
    _, _, heads = ck.bert_reference(tensors, config, x["token_ids"], x["segment_ids"], x["padding_mask"])
    np.testing.assert_allclose(_np(model(x)), heads["classifier"], **TOLERANCE)


def test_hf_bert_model_backbone_matches_float64_reference(folders):
    model = zoo.from_pretrained(folders["hf_bert"])
    assert type(model).__name__ == "BertSentenceEncoder"  # no head in a BertModel: the default task
    tensors, config = _hf(folders["hf_bert"])
    x = bert_inputs(config["vocab_size"], seed=2)
    sequence, pooled, _ = ck.bert_reference(tensors, config, x["token_ids"], x["segment_ids"], x["padding_mask"])
    out = model.backbone(x)
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(_np(out["sequence_output"])[real], sequence[real], **TOLERANCE)
    np.testing.assert_allclose(_np(out["pooled_output"]), pooled, **TOLERANCE)


def test_a_head_the_checkpoint_lacks_starts_fresh_with_a_warning(folders):
    with pytest.warns(UserWarning, match="fresh weights"):
        model = zoo.from_pretrained(folders["hf_bert"], task="classifier", num_classes=4)
    assert model.num_classes == 4
    with pytest.warns(UserWarning, match="3 classes, not 5"):
        model = zoo.from_pretrained(folders["hf_bert_cls"], task="classifier", num_classes=5)
    assert model.num_classes == 5


# --- keras-hub presets against keras-hub's own models -----------------------------------


def test_keras_hub_gpt2_preset_logits_match_keras_hub(folders):
    folder, hub = folders["kh_gpt2"]
    lm = zoo.from_pretrained(folder)
    assert type(lm).__name__ == "GPTCausalLM"
    x = gpt_inputs(hub.backbone.vocabulary_size, seed=4)
    expected = _np(hub(x))
    assert np.abs(expected).max() > 1.0
    np.testing.assert_allclose(_np(lm(x)), expected, **TOLERANCE)


def test_keras_hub_bert_classifier_preset_logits_match_keras_hub(folders):
    folder, hub = folders["kh_bert_cls"]
    model = zoo.from_pretrained(folder)
    assert type(model).__name__ == "BertClassifier" and model.num_classes == 3
    x = bert_inputs(hub.backbone.vocabulary_size, seed=5)
    np.testing.assert_allclose(_np(model(x)), _np(hub(x)), **TOLERANCE)


def test_keras_hub_bert_backbone_preset_matches_keras_hub(folders):
    folder, hub = folders["kh_bert"]
    backbone = zoo.from_pretrained(folder, task=None)
    x = bert_inputs(hub.vocabulary_size, seed=6)
    expected, got = hub(x), backbone(x)
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(_np(got["sequence_output"])[real], _np(expected["sequence_output"])[real], **TOLERANCE)
    np.testing.assert_allclose(_np(got["pooled_output"]), _np(expected["pooled_output"]), **TOLERANCE)


def test_zoo_build_accepts_a_checkpoint_folder(folders):
    model = zoo.build(str(folders["hf_bert_cls"]), task="classifier")
    assert type(model).__name__ == "BertClassifier" and model.tokenizer is not None


# --- Tokenizers against the `tokenizers` package -----------------------------------------


def test_gpt2_tokenizer_ids_match_byte_level_bpe(folders):
    from tokenizers import ByteLevelBPETokenizer

    folder = folders["hf_gpt2"]
    reference = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    lm = zoo.from_pretrained(folder)
    merged = 0
    for sentence in ck.SENTENCES:
        expected = reference.encode(sentence).ids
        assert _np(lm.tokenizer(sentence)).tolist() == expected, sentence
        merged += sum(i >= 256 for i in expected)
    assert merged >= 5  # the merges are exercised, "é" among them


def test_gpt2_tokenizer_of_a_keras_hub_preset_matches_byte_level_bpe(folders, tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    ck.write_gpt2_vocabulary(tmp_path)
    reference = ByteLevelBPETokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    lm = zoo.from_pretrained(folders["kh_gpt2"][0])
    for sentence in ck.SENTENCES:
        assert _np(lm.tokenizer(sentence)).tolist() == reference.encode(sentence).ids, sentence


def test_bert_tokenizer_ids_match_bert_word_piece(folders):
    from tokenizers import BertWordPieceTokenizer

    folder = folders["hf_bert_mlm"]
    reference = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True)
    model = zoo.from_pretrained(folder)
    known = 0
    for sentence in ck.SENTENCES:
        expected = reference.encode(sentence, add_special_tokens=False).ids
        assert _np(model.tokenizer(sentence)).tolist() == expected, sentence
        known += sum(i != 1 for i in expected)  # [UNK] is 1
    assert known >= 20  # accents stripped ("café" -> cafe), CJK split, word pieces


def test_cased_bert_keeps_case_and_accents(tmp_path, folders):
    from tokenizers import BertWordPieceTokenizer

    folder = ck.hf_bert_folder(tmp_path / "cased", "BertModel")
    ck.write_bert_vocabulary(folder, lowercase=False)
    reference = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=False)
    model = zoo.from_pretrained(folder)
    for sentence in ck.SENTENCES:
        assert _np(model.tokenizer(sentence)).tolist() == reference.encode(sentence, add_special_tokens=False).ids


# --- The layouts of the real checkpoints -------------------------------------------------


def _rewrite(folder, change):
    from safetensors.numpy import save_file

    tensors = load_file(str(folder / "model.safetensors"))
    save_file(change(tensors), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return tensors


def test_the_layout_of_bert_base_uncased_loads(tmp_path):
    """BertForMaskedLM with LayerNorm gamma/beta names, a pooler and the next-sentence head, as on the Hub."""
    folder = ck.hf_bert_folder(tmp_path / "bert", "BertForMaskedLM")
    rng = np.random.default_rng(5)
    d = ck.BERT_SIZES["hidden_dim"]
    extra = {
        "bert.pooler.dense.weight": rng.normal(0, 0.2, (d, d)).astype("float32"),
        "bert.pooler.dense.bias": rng.normal(0, 0.2, d).astype("float32"),
        "cls.seq_relationship.weight": rng.normal(0, 0.2, (2, d)).astype("float32"),
        "cls.seq_relationship.bias": np.zeros(2, "float32"),
    }

    def old_names(tensors):
        renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                   for k, v in tensors.items()}
        return {**renamed, **extra}

    tensors = {**_rewrite(folder, old_names), **extra}
    config = json.loads((folder / "config.json").read_text())
    model = zoo.from_pretrained(folder)
    x = bert_inputs(config["vocab_size"], seed=11)
    positions = np.array([[2, 3], [4, 5]], "int32")
    _, pooled, heads = ck.bert_reference(tensors, config, x["token_ids"], x["segment_ids"], x["padding_mask"])
    expected = np.take_along_axis(heads["masked_lm"], positions[:, :, None], axis=1)
    np.testing.assert_allclose(_np(model({**x, "mask_positions": positions})), expected, **TOLERANCE)
    np.testing.assert_allclose(_np(model.backbone(x)["pooled_output"]), pooled, **TOLERANCE)


def test_the_layout_of_the_gpt2_repository_loads(tmp_path):
    """No `transformer.` prefix, the causal-mask buffers, a tied lm_head.weight, and sharded files."""
    import shutil

    from safetensors.numpy import save_file

    folder = ck.hf_gpt2_folder(tmp_path / "gpt2", prefix="")
    tensors = load_file(str(folder / "model.safetensors"))
    p = ck.GPT2_SIZES["max_sequence_length"]
    buffers = {f"h.{i}.attn.bias": np.tril(np.ones((1, 1, p, p), "float32")) for i in range(2)}
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in shards.items():
        part = {k: tensors[k] for k in keys}
        if file.startswith("model-00002"):
            part.update({**buffers, "lm_head.weight": tensors["wte.weight"]})
        save_file(part, str(folder / file), metadata={"format": "pt"})
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    single = tmp_path / "single"
    shutil.copytree(folder, single)
    (folder / "model.safetensors").unlink()
    config = json.loads((folder / "config.json").read_text())
    x = gpt_inputs(config["vocab_size"], seed=12)
    expected = ck.gpt2_reference_logits(tensors, config, x["token_ids"])
    np.testing.assert_allclose(_np(zoo.from_pretrained(folder)(x)), expected, **TOLERANCE)
    np.testing.assert_allclose(_np(zoo.from_pretrained(single)(x)), expected, **TOLERANCE)
