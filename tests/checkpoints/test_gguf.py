"""GGUF (llama.cpp, Ollama, LM Studio) out and in, on tiny random GPT-2 and
Llama-family checkpoints with real byte-level BPE tokenizers.

`gguf.GGUFReader` reads every export back: the keys and tensors llama.cpp
needs, with their shapes, types and values. Export then
`zoo.from_pretrained` is the identity in f32 and within the quantization's
error in q8_0 / q4_0; the tokenizer rebuilt from the GGUF gives the same
ids on non-ASCII text. A model quantized by the zoo (int8, int4) exports
as it computes: its f32 export gives its logits, its q8_0 / q4_0 export
(the default) is within the block type's error of its dequantized weights.
Bad models and bad files are refused in one line.
Against llama.cpp itself (marked integration): llama-cpp-python loads the
f32 export, and its logits and 64 greedy tokens are the zoo's.
"""

import json
import shutil

import keras
import numpy as np
import pytest

import zoo
from tests.checkpoints import gemma_checkpoints as gc
from tests.checkpoints import llama_checkpoints as lc
from tests.checkpoints import stand_ins as ck
from tests.checkpoints.test_from_pretrained import _np
from zoo.checkpoints import CheckpointError
from zoo.tokenizers import HuggingFaceTokenizer

gguf = pytest.importorskip("gguf")

CASES = ["llama", "llama_mha", "mistral", "qwen2", "qwen3", "gpt2", "sentence_piece", "gemma3_v5", "gemma3_pattern"]
ARCHITECTURES = {"llama": "llama", "llama_mha": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                 "gpt2": "gpt2", "sentence_piece": "llama", "gemma3_v5": "gemma3", "gemma3_pattern": "gemma3"}
# llama.cpp's CPU backend reads the tanh GELU from a float16 table (ggml's GGML_GELU_FP16): 1e-3 on these logits
GELU_TOLERANCE = 5e-3
SENTENCES = lc.SENTENCES + ck.SENTENCES


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{case: the zoo model loaded from a tiny Hugging Face folder}; "chat" a Qwen2 with ChatML's template."""
    root = tmp_path_factory.mktemp("gguf_checkpoints")
    models = {name: zoo.from_pretrained(lc.hf_folder(root / name, name, seed=i)) for i, name in enumerate(CASES[:5])}
    models["gpt2"] = zoo.from_pretrained(ck.hf_gpt2_folder(root / "gpt2"))
    models["chat"] = zoo.from_pretrained(ck.chat_folder(root / "chat"))
    # Llama 2's kind of tokenizer: SentencePiece's BPE with byte fallback
    models["sentence_piece"] = zoo.from_pretrained(lc.hf_folder(root / "sentence_piece", "llama_mha", seed=11,
                                                                vocab_size=384))
    models["sentence_piece"].tokenizer = HuggingFaceTokenizer.from_file(
        sentence_piece_tokenizer(), bos_token="<s>", eos_token="</s>"
    )
    for i, name in enumerate(["gemma3", "gemma3_v5", "gemma3_pattern"]):
        models[name] = zoo.from_pretrained(gc.hf_folder(root / name, name, seed=20 + i))
    # GPT-2 with rows of whole 32-value blocks, so that q8_0 and q4_0 reach its matrices
    models["gpt2_wide"] = zoo.from_pretrained(ck.hf_gpt2_folder(root / "gpt2_wide", seed=3, hidden_dim=32,
                                                                intermediate_dim=128))
    return models


def sentence_piece_tokenizer():
    """A tokenizer.json of Llama 2's kind (SentencePiece's BPE as transformers converts it): "▁" for each
    space and one before the text, <unk> <s> </s>, the 256 byte tokens <0x00>...<0xFF> for characters
    outside the vocabulary, BPE merges learned on the corpus, BOS added."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors, trainers

    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizer
    trained.train_from_iterator(lc.CORPUS, trainers.BpeTrainer(vocab_size=100, show_progress=False))
    learned = json.loads(trained.to_str())["model"]
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + sorted(learned["vocab"], key=learned["vocab"].get)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(pieces)}, merges=merges, unk_token="<unk>",
                                   byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizer
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
    return backend


def inputs(vocabulary_size, batch=2, length=12, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocabulary_size, (batch, length)).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


def fields_of(path):
    reader = gguf.GGUFReader(str(path))
    return reader, {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def hf_tensors(model):
    return zoo.checkpoints.huggingface_tensors(model)


def llama_cpp_rows(weight, heads):
    """transformers' rotate-half rows -> llama.cpp's interleaved pairs: in each head
    of width k, row 2j is row j and row 2j + 1 is row k/2 + j."""
    out = np.empty_like(weight)
    k = weight.shape[0] // heads
    for h in range(heads):
        for j in range(k // 2):
            out[h * k + 2 * j] = weight[h * k + j]
            out[h * k + 2 * j + 1] = weight[h * k + k // 2 + j]
    return out


# --- What the export writes --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "qwen3"])
def test_llama_family_export_has_the_keys_and_tensors_llama_cpp_reads(models, name, tmp_path):
    model = models[name]
    backbone, config = model.backbone, model.backbone.get_config()
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    reader, fields = fields_of(path)
    arch = ARCHITECTURES[name]
    assert fields["general.architecture"] == arch
    expected = {
        "context_length": config["max_sequence_length"], "embedding_length": config["hidden_dim"],
        "block_count": config["num_layers"], "feed_forward_length": config["intermediate_dim"],
        "attention.head_count": config["num_heads"], "attention.head_count_kv": config["num_key_value_heads"],
        "rope.dimension_count": backbone.head_dim, "vocab_size": config["vocabulary_size"],
    }
    for key, value in expected.items():
        assert fields[f"{arch}.{key}"] == value, key
    assert fields[f"{arch}.rope.freq_base"] == pytest.approx(config["rope_theta"])
    assert fields[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(config["rms_norm_epsilon"])
    if name == "qwen3":
        assert fields["qwen3.attention.key_length"] == fields["qwen3.attention.value_length"] == backbone.head_dim
    assert fields["general.file_type"] == gguf.LlamaFileType.ALL_F32

    tensors = {t.name: t for t in reader.tensors}
    d, ff, h, g, k = (config["hidden_dim"], config["intermediate_dim"], config["num_heads"],
                      config["num_key_value_heads"], backbone.head_dim)
    shapes = {  # ggml's order: (columns, rows)
        "token_embd.weight": (d, config["vocabulary_size"]), "output_norm.weight": (d,),
        "blk.1.attn_norm.weight": (d,), "blk.1.attn_q.weight": (d, h * k), "blk.1.attn_k.weight": (d, g * k),
        "blk.1.attn_v.weight": (d, g * k), "blk.1.attn_output.weight": (h * k, d), "blk.1.ffn_norm.weight": (d,),
        "blk.1.ffn_gate.weight": (d, ff), "blk.1.ffn_up.weight": (d, ff), "blk.1.ffn_down.weight": (ff, d),
    }
    if not config["tie_word_embeddings"]:
        shapes["output.weight"] = (d, config["vocabulary_size"])
    if name == "qwen2":
        shapes.update({"blk.1.attn_q.bias": (h * k,), "blk.1.attn_k.bias": (g * k,), "blk.1.attn_v.bias": (g * k,)})
    if name == "qwen3":
        shapes.update({"blk.1.attn_q_norm.weight": (k,), "blk.1.attn_k_norm.weight": (k,)})
    if name == "llama":  # Llama 3's rope scaling: llama.cpp's per-frequency divisors
        shapes["rope_freqs.weight"] = (k // 2,)
    per_layer = {n for n in shapes if n.startswith("blk.1.")}
    wanted = {n for n in shapes if not n.startswith("blk.")} | {n.replace("blk.1.", f"blk.{i}.")
                                                                 for n in per_layer for i in range(2)}
    assert set(tensors) == wanted
    for tensor_name, shape in shapes.items():
        assert tuple(int(n) for n in tensors[tensor_name].shape) == shape, tensor_name
        assert tensors[tensor_name].tensor_type == gguf.GGMLQuantizationType.F32

    # Values: the q / k rows permuted for llama.cpp's rotary layout in the llama architecture only.
    hf = hf_tensors(model)
    q, kk = hf["model.layers.1.self_attn.q_proj.weight"], hf["model.layers.1.self_attn.k_proj.weight"]
    if arch == "llama":
        q, kk = llama_cpp_rows(q, h), llama_cpp_rows(kk, g)
    np.testing.assert_array_equal(np.asarray(tensors["blk.1.attn_q.weight"].data), q)
    np.testing.assert_array_equal(np.asarray(tensors["blk.1.attn_k.weight"].data), kk)
    np.testing.assert_array_equal(np.asarray(tensors["blk.1.ffn_down.weight"].data),
                                  hf["model.layers.1.mlp.down_proj.weight"])
    if name == "llama":
        scaling = config["rope_scaling"]
        inverse = 1.0 / config["rope_theta"] ** (np.arange(0, k, 2) / k)
        wavelength = 2 * np.pi / inverse
        context = scaling["original_max_position_embeddings"]
        low, high = context / scaling["low_freq_factor"], context / scaling["high_freq_factor"]
        smooth = (context / wavelength - scaling["low_freq_factor"]) / (scaling["high_freq_factor"] - scaling["low_freq_factor"])
        divisor = np.where(wavelength < high, 1.0, np.where(wavelength > low, scaling["factor"],
                                                            1 / ((1 - smooth) / scaling["factor"] + smooth)))
        np.testing.assert_allclose(np.asarray(tensors["rope_freqs.weight"].data), divisor, rtol=1e-6)


def test_gpt2_export_has_the_keys_and_tensors_llama_cpp_reads(models, tmp_path):
    model = models["gpt2"]
    config = model.backbone.get_config()
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    reader, fields = fields_of(path)
    assert fields["general.architecture"] == "gpt2"
    for key, value in {"context_length": config["max_sequence_length"], "embedding_length": config["hidden_dim"],
                       "block_count": config["num_layers"], "feed_forward_length": config["intermediate_dim"],
                       "attention.head_count": config["num_heads"]}.items():
        assert fields[f"gpt2.{key}"] == value, key
    assert fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(config["layer_norm_epsilon"])
    tensors = {t.name: t for t in reader.tensors}
    d, ff, n = config["hidden_dim"], config["intermediate_dim"], config["num_layers"]
    layer = {"attn_norm.weight": (d,), "attn_norm.bias": (d,), "attn_qkv.weight": (d, 3 * d), "attn_qkv.bias": (3 * d,),
             "attn_output.weight": (d, d), "attn_output.bias": (d,), "ffn_norm.weight": (d,), "ffn_norm.bias": (d,),
             "ffn_up.weight": (d, ff), "ffn_up.bias": (ff,), "ffn_down.weight": (ff, d), "ffn_down.bias": (d,)}
    shapes = {"token_embd.weight": (d, config["vocabulary_size"]), "position_embd.weight": (d, config["max_sequence_length"]),
              "output_norm.weight": (d,), "output_norm.bias": (d,)}
    shapes.update({f"blk.{i}.{part}": shape for i in range(n) for part, shape in layer.items()})
    assert {name: tuple(int(x) for x in t.shape) for name, t in tensors.items()} == shapes  # the head is tied: no output
    hf = hf_tensors(model)  # GPT-2's Conv1D (in, out) weights are stored as (out, in)
    np.testing.assert_array_equal(np.asarray(tensors["blk.0.attn_qkv.weight"].data), hf["transformer.h.0.attn.c_attn.weight"].T)


@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "chat"])
def test_the_tokenizer_is_written_as_llama_cpp_keeps_it(models, name, tmp_path):
    model = models[name]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f16")
    _, fields = fields_of(path)
    tokenizer = model.tokenizer
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert fields["tokenizer.ggml.pre"] == "gpt-2"  # the stand-ins split words with GPT-2's pattern
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == model.backbone.vocabulary_size
    if name == "gpt2":
        vocabulary = {t: int(i) for t, i in tokenizer.vocabulary.items()}
        merges = list(tokenizer.merges)
        bos = eos = vocabulary["<|endoftext|>"]
        add_bos = False
    else:
        data = tokenizer.tokenizer_json()
        vocabulary = {**data["model"]["vocab"], **{t["content"]: t["id"] for t in data["added_tokens"]}}
        merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
        bos, eos = tokenizer.start_token_id, tokenizer.end_token_ids[0]
        add_bos = name == "llama"  # Llama 3's post-processor adds BOS; Qwen's adds nothing
    assert all(tokens[i] == t for t, i in vocabulary.items())
    assert fields["tokenizer.ggml.merges"] == merges
    types = fields["tokenizer.ggml.token_type"]
    assert types[eos] == gguf.TokenType.CONTROL
    assert all(types[i] == gguf.TokenType.UNUSED for i in range(len(vocabulary), len(tokens)))  # padded rows
    assert fields["tokenizer.ggml.eos_token_id"] == eos
    if bos is not None:
        assert fields["tokenizer.ggml.bos_token_id"] == bos
    assert fields["tokenizer.ggml.add_bos_token"] is add_bos
    if name == "chat":
        assert fields["tokenizer.chat_template"] == tokenizer.chat_template
        assert tokens[fields["tokenizer.ggml.eot_token_id"]] == "<|endoftext|>"


def test_a_sentence_piece_tokenizer_is_written_as_llama_cpp_keeps_it(models, tmp_path):
    model = models["sentence_piece"]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f16")
    _, fields = fields_of(path)
    data = model.tokenizer.tokenizer_json()
    assert fields["tokenizer.ggml.model"] == "llama"
    tokens, types, scores = (fields[f"tokenizer.ggml.{k}"] for k in ("tokens", "token_type", "scores"))
    vocabulary = data["model"]["vocab"]
    assert all(tokens[i] == t for t, i in vocabulary.items())
    assert types[0] == gguf.TokenType.UNKNOWN and types[1] == types[2] == gguf.TokenType.CONTROL
    assert all(types[i] == gguf.TokenType.BYTE for i in range(3, 259))
    assert fields["tokenizer.ggml.unknown_token_id"] == 0 and fields["tokenizer.ggml.bos_token_id"] == 1
    assert fields["tokenizer.ggml.add_bos_token"] is True and fields["tokenizer.ggml.add_space_prefix"] is True
    # llama.cpp joins the pair whose join scores highest: the earlier a merge, the higher its token's score
    merged = ["".join(m) if isinstance(m, list) else m.replace(" ", "") for m in data["model"]["merges"]]
    firsts = list(dict.fromkeys(merged))
    assert [scores[vocabulary[t]] for t in firsts] == sorted((scores[vocabulary[t]] for t in firsts), reverse=True)
    assert scores[vocabulary[firsts[0]]] == -1.0


@pytest.mark.parametrize("outtype,matrix", [("f16", "F16"), ("bf16", "BF16"), ("q8_0", "Q8_0"), ("q4_0", "Q4_0")])
def test_outtype_sets_the_matrices_type_norms_and_biases_stay_f32(models, outtype, matrix, tmp_path):
    path = zoo.export(models["qwen2"], tmp_path / "m.gguf", format="gguf", outtype=outtype)
    reader, fields = fields_of(path)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert fields["general.file_type"] == getattr(gguf.LlamaFileType, f"MOSTLY_{outtype.upper()}")
    assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == matrix
    assert types["blk.0.attn_norm.weight"] == types["blk.0.attn_q.bias"] == types["output_norm.weight"] == "F32"
    # ffn_down's rows are 48 values long: not whole 32-value blocks, so llama.cpp's converter writes f16
    assert types["blk.0.ffn_down.weight"] == ("F16" if outtype in ("q8_0", "q4_0") else matrix)


# --- Export then import ------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_f32_export_then_import_is_the_identity(models, name, tmp_path):
    model = models[name]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    again = zoo.from_pretrained(path)
    assert type(again) is type(model)
    config = again.backbone.get_config()  # GGUF keeps no dropout rate: the import's is 0
    assert config == {**model.backbone.get_config(), "name": config["name"], "dropout": 0.0}
    x = inputs(model.backbone.vocabulary_size)
    np.testing.assert_allclose(_np(again(x)), _np(model(x)), rtol=0, atol=1e-6)
    for sentence in SENTENCES:
        assert _np(again.tokenizer(sentence)).tolist() == _np(model.tokenizer(sentence)).tolist(), sentence
        assert again.tokenizer.detokenize(again.tokenizer(sentence)) == model.tokenizer.detokenize(model.tokenizer(sentence))


def test_a_lora_model_is_exported_with_its_lora_merged(models, tmp_path):
    model = zoo.from_pretrained(zoo.export(models["qwen2"], tmp_path / "base.gguf", format="gguf", outtype="f32"))
    model.enable_lora(4, ("query_key_value", "gate"))
    rng = np.random.default_rng(5)
    for weight in model.weights:
        if "lora" in weight.path:
            weight.assign(rng.normal(0, 0.2, tuple(weight.shape)).astype("float32"))
    x = inputs(model.backbone.vocabulary_size)
    before = _np(models["qwen2"](x))
    assert np.abs(_np(model(x)) - before).max() > 0.1  # the LoRA changes the logits
    again = zoo.from_pretrained(zoo.export(model, tmp_path / "lora.gguf", format="gguf", outtype="f32"))
    np.testing.assert_allclose(_np(again(x)), _np(model(x)), rtol=0, atol=1e-5)


def test_chat_template_and_special_ids_come_back(models, tmp_path):
    model = models["chat"]
    again = zoo.from_pretrained(zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f16"))
    assert again.tokenizer.chat_template == model.tokenizer.chat_template
    assert again.tokenizer.end_token_ids == model.tokenizer.end_token_ids
    assert again.tokenizer.pad_token_id == model.tokenizer.pad_token_id
    messages = [{"role": "user", "content": "Grüße, 世界 🙂"}]
    assert again.tokenizer.apply_chat_template(messages) == model.tokenizer.apply_chat_template(messages)


def block_bound(weight, outtype):
    """The largest error of one value in each 32-value block: half a Q8_0 step (amax / 127 / 2), a whole
    Q4_0 step (amax / 8: the rounding, and the clipping at the scale's far end); plus the step's own
    float16 rounding times the largest integer (127 or 8 steps of 2^-11 relative error)."""
    blocks = weight.reshape(-1, 32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    step = amax / 127 if outtype == "q8_0" else amax / 8
    step = step * (0.5 + 127 * 2.0**-11 if outtype == "q8_0" else 1 + 8 * 2.0**-11)
    return np.broadcast_to(step, blocks.shape).reshape(weight.shape)


@pytest.mark.parametrize("outtype,logit_error", [("q8_0", 0.03), ("q4_0", 0.5)])
@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt2_wide"])
def test_quantized_export_then_import_is_within_the_quantization_error(models, name, outtype, logit_error, tmp_path):
    model = models[name]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype=outtype)
    again = zoo.from_pretrained(path)
    original, loaded = hf_tensors(model), hf_tensors(again)
    quantized = 0
    for key, weight in original.items():
        matrix = weight.T if key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else weight  # (out, in)
        if weight.ndim == 2 and matrix.shape[-1] % 32 == 0 and "wpe" not in key:
            back = loaded[key].T if matrix is not weight else loaded[key]
            assert np.all(np.abs(back - matrix) <= block_bound(matrix, outtype) + 1e-7), key
            quantized += 1
        elif weight.ndim == 1:
            np.testing.assert_array_equal(loaded[key], weight, err_msg=key)  # norms and biases stay f32
    assert quantized >= 5
    x = inputs(model.backbone.vocabulary_size)
    expected, found = _np(model(x)), _np(again(x))
    relative = np.linalg.norm(found - expected) / np.linalg.norm(expected)
    assert 0 < relative < logit_error, relative


# --- A model quantized by the zoo ---------------------------------------------------------------


@pytest.fixture(scope="module")
def quantizable(tmp_path_factory):
    """{name: a tiny Hugging Face folder} to load and quantize afresh: a Llama, and a GPT-2 whose
    matrices' rows are whole 32-value blocks."""
    root = tmp_path_factory.mktemp("gguf_quantized")
    return {"llama": lc.hf_folder(root / "llama", "llama", seed=0),
            "gpt2_wide": ck.hf_gpt2_folder(root / "gpt2_wide", seed=3, hidden_dim=32, intermediate_dim=128)}


def weight_only(mode, block_size=None):
    """Keras' int8 or int4 weights without its per-row rounding of the activations, which llama.cpp's
    float matrix products do not do: the model then computes with its dequantized weights alone."""
    if mode == "int8":
        return keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)
    return keras.quantizers.Int4QuantizationConfig(activation_quantizer=None, block_size=block_size)


@pytest.mark.parametrize("mode,block_size", [("int8", None), ("int4", 128), ("int4", -1)])
@pytest.mark.parametrize("name", ["llama", "gpt2_wide"])
def test_the_f32_export_of_a_quantized_model_computes_its_logits(quantizable, name, mode, block_size, tmp_path):
    """int8 per output unit, int4 in groups with zero points (128: one group over these widths) and int4
    per output unit: the dequantized weights are exactly those the quantized model computes with."""
    model = zoo.from_pretrained(quantizable[name])
    x = inputs(model.backbone.vocabulary_size)
    float_logits = _np(model(x))
    model.quantize(mode, config=weight_only(mode, block_size))
    expected = _np(model(x))
    assert np.abs(expected - float_logits).max() > 1e-3  # the quantization changed the logits
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    assert fields_of(path)[1]["general.file_type"] == gguf.LlamaFileType.ALL_F32  # the outtype asked for
    assert_computes_as_its_export(model, zoo.from_pretrained(path), x)


def assert_computes_as_its_export(model, again, x):
    """`again`, a float model loaded from `model`'s f32 export, computes `model`'s logits: exactly, or
    for int4 in groups, which multiplies its activations rounded to int8 in its groups (as llama.cpp's
    q4_0 does) where the float model multiplies them as they are, with its weights exactly and its
    logits within that rounding's error."""
    from zoo.checkpoints.float_weights import float_weights

    expected, found = _np(model(x)), _np(again(x))
    if not any(getattr(layer, "_int4_block_size", None) not in (None, -1) for layer in model._flatten_layers()):
        np.testing.assert_allclose(found, expected, rtol=0, atol=1e-5)
        return
    with float_weights(model):
        for key, weight in hf_tensors(model).items():
            np.testing.assert_allclose(hf_tensors(again)[key], weight, rtol=0, atol=1e-6, err_msg=key)
    relative = np.linalg.norm(found - expected) / np.linalg.norm(expected)
    assert 0 < relative < 5e-2, relative  # tiny random models: the rounding's error adds up over the layers


def test_a_quantized_model_with_lora_is_exported_with_its_lora_merged(quantizable, tmp_path):
    model = zoo.from_pretrained(quantizable["llama"])
    model.quantize("int4", config=weight_only("int4", 128))
    x = inputs(model.backbone.vocabulary_size)
    before = _np(model(x))
    model.enable_lora(4, ("query_key_value", "gate"))
    rng = np.random.default_rng(5)
    for weight in model.weights:
        if "lora" in weight.path:
            weight.assign(rng.normal(0, 0.2, tuple(weight.shape)).astype("float32"))
    assert np.abs(_np(model(x)) - before).max() > 0.1  # the LoRA changes the logits
    again = zoo.from_pretrained(zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32"))
    assert_computes_as_its_export(model, again, x)


@pytest.mark.parametrize("mode,outtype,logit_error", [("int8", "q8_0", 0.03), ("int4", "q4_0", 0.5)])
@pytest.mark.parametrize("name", ["llama", "gpt2_wide"])
def test_a_quantized_model_exports_to_its_own_bits_within_their_error(quantizable, name, mode, outtype,
                                                                     logit_error, tmp_path):
    """No outtype: int8 -> q8_0, int4 -> q4_0. Each matrix of the file is within the block type's error
    of the quantized model's own dequantized weights, and its logits are near the quantized model's."""
    from zoo.checkpoints.float_weights import float_weights

    model = zoo.from_pretrained(quantizable[name], quantize=mode)  # Keras' default configs
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf")
    assert fields_of(path)[1]["general.file_type"] == getattr(gguf.LlamaFileType, f"MOSTLY_{outtype.upper()}")
    again = zoo.from_pretrained(path)
    with float_weights(model):
        original = hf_tensors(model)
    loaded, quantized = hf_tensors(again), 0
    for key, weight in original.items():
        matrix = weight.T if key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else weight  # (out, in)
        if weight.ndim == 2 and matrix.shape[-1] % 32 == 0 and "wpe" not in key:
            back = loaded[key].T if matrix is not weight else loaded[key]
            assert np.all(np.abs(back - matrix) <= block_bound(matrix, outtype) + 1e-7), key
            quantized += 1
    assert quantized >= 5
    x = inputs(model.backbone.vocabulary_size)
    expected, found = _np(model(x)), _np(again(x))
    relative = np.linalg.norm(found - expected) / np.linalg.norm(expected)
    assert 0 < relative < logit_error, relative


@pytest.mark.parametrize("format,mode", [("huggingface", "int4"), ("keras-hub", "int4"), ("gguf", "float8")])
def test_a_quantized_model_is_still_refused_by_the_float_checkpoint_formats(quantizable, format, mode, tmp_path):
    """The float checkpoints refuse int8 and int4; GGUF refuses float8 (its matrix products alone are float8)."""
    model = zoo.from_pretrained(quantizable["llama"], quantize=mode)
    with pytest.raises(ValueError, match=rf"export writes float weights, and this LlamaCausalLM is quantized \({mode}\); "
                                         r"expected a float model"):
        zoo.export(model, tmp_path / "out", format=format)
    assert not (tmp_path / "out").exists()


# --- Refusals --------------------------------------------------------------------------------


def test_a_character_tokenizer_is_refused_before_anything_is_written(tmp_path):
    from zoo.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.from_text("abcdefghij ROMEO:\n")
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"GGUF export: a GGUF file carries its tokenizer, and .*CharTokenizer") as error:
        zoo.export(lm, tmp_path / "m.gguf", format="gguf")
    assert "\n" not in str(error.value)
    assert not any(tmp_path.iterdir())


def test_a_model_without_a_tokenizer_is_refused(models, tmp_path):
    model = zoo.models.LlamaCausalLM(models["qwen2"].backbone)
    with pytest.raises(ValueError, match="has no tokenizer"):
        zoo.export(model, tmp_path / "m.gguf", format="gguf")
    assert not any(tmp_path.iterdir())


def test_a_gemma_whose_attention_scale_llama_cpp_does_not_compute_is_refused(models, tmp_path):
    with pytest.raises(ValueError, match=r"llama.cpp's gemma3 scales attention by 1/sqrt\(head_dim\), and this model's "
                                         r"query_pre_attention_scalar is 12; expected the head width 16"):
        zoo.export(models["gemma3"], tmp_path / "m.gguf", format="gguf")
    assert not any(tmp_path.iterdir())


def test_gemma3_export_has_what_llama_cpp_reads(models, tmp_path):
    model = models["gemma3_pattern"]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    reader, fields = fields_of(path)
    config = model.backbone.get_config()
    assert fields["general.architecture"] == "gemma3"
    assert fields["gemma3.attention.sliding_window"] == config["sliding_window"]
    assert fields["gemma3.attention.sliding_window_pattern"] == [t == "sliding_attention" for t in model.backbone.layer_types]
    assert fields["gemma3.rope.freq_base"] == config["rope_theta"]
    assert fields["gemma3.rope.freq_base_swa"] == config["local_rope_theta"]
    assert fields["gemma3.attention.key_length"] == model.backbone.head_dim
    assert fields["tokenizer.ggml.model"] == "llama" and fields["tokenizer.ggml.add_space_prefix"] is False
    tensors = {t.name: t for t in reader.tensors}
    hf = hf_tensors(model)
    # Gemma's RMSNorm scales by (1 + w), llama.cpp's by w: the file holds 1 + w, as llama.cpp's converter writes
    np.testing.assert_array_equal(np.asarray(tensors["blk.0.post_ffw_norm.weight"].data),
                                  hf["model.layers.0.post_feedforward_layernorm.weight"] + 1)
    np.testing.assert_array_equal(np.asarray(tensors["blk.0.ffn_norm.weight"].data),
                                  hf["model.layers.0.pre_feedforward_layernorm.weight"] + 1)
    assert "output.weight" not in tensors  # tied


def test_an_unknown_outtype_is_refused(models, tmp_path):
    with pytest.raises(ValueError, match=r"outtype='q5_k'; expected one of 'f32', 'f16'"):
        zoo.export(models["qwen2"], tmp_path / "m.gguf", format="gguf", outtype="q5_k")


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory):
    return zoo.export(models["qwen2"], tmp_path_factory.mktemp("gguf") / "m.gguf", format="gguf", outtype="q8_0")


def rewrite(source, target, arch=None, change=None, raw_dtype=None):
    """A copy of a GGUF file with its architecture renamed, or one tensor changed (`change(name, array)`)."""
    reader = gguf.GGUFReader(str(source))
    fields = {key: field for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    old_arch = fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(target), arch or old_arch)
    for key, field in fields.items():
        if key == "general.architecture":
            continue
        value, kind = field.contents(), field.types[0]
        key = key.replace(f"{old_arch}.", f"{arch}.") if arch else key
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    for tensor in reader.tensors:
        data = np.asarray(tensor.data)
        if change and tensor.tensor_type == gguf.GGMLQuantizationType.F32:
            data = change(tensor.name, data)
        qtype = tensor.tensor_type
        if raw_dtype is not None and tensor.name == "blk.0.attn_v.weight":  # zero blocks of another type
            block, size = gguf.GGML_QUANT_SIZES[raw_dtype]
            columns, rows = int(tensor.shape[0]), int(np.prod(tensor.shape[1:]))
            data, qtype = np.zeros((rows, columns // block * size), np.uint8), raw_dtype
        writer.add_tensor(tensor.name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def test_a_truncated_file_is_refused(exported, tmp_path):
    short = tmp_path / "short.gguf"
    short.write_bytes(exported.read_bytes()[: exported.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"short.gguf: unreadable GGUF file, truncated or corrupted"):
        zoo.from_pretrained(short)


def test_an_unknown_architecture_is_refused(exported, tmp_path):
    other = rewrite(exported, tmp_path / "falcon.gguf", arch="falcon")
    with pytest.raises(CheckpointError, match=r"falcon.gguf: general.architecture is 'falcon'; expected one of 'gpt2'"):
        zoo.from_pretrained(other)


def test_a_tensor_of_the_wrong_shape_is_refused(exported, tmp_path):
    wrong = rewrite(exported, tmp_path / "wrong.gguf",
                    change=lambda name, data: data[:-1] if name == "blk.1.attn_norm.weight" else data)
    with pytest.raises(CheckpointError, match=r"wrong.gguf \(blk.1.attn_norm.weight\): tensor "
                                              r"'model.layers.1.input_layernorm.weight' has shape \(31,\); expected \(32,\)"):
        zoo.from_pretrained(wrong)


def test_an_unsupported_quantization_is_refused(exported, tmp_path):
    odd = rewrite(exported, tmp_path / "odd.gguf", raw_dtype=gguf.GGMLQuantizationType.Q8_1)
    with pytest.raises(CheckpointError, match=r"odd.gguf: tensor 'blk.0.attn_v.weight' is Q8_1, which gguf cannot dequantize"):
        zoo.from_pretrained(odd)


# --- Ollama and the command line ---------------------------------------------------------------


def test_ollama_modelfile_has_the_template_and_stops(models, tmp_path):
    path = zoo.export(models["chat"], tmp_path / "out", format="gguf", outtype="q8_0", ollama=True)
    assert path == tmp_path / "out" / "model.gguf"
    text = (tmp_path / "out" / "Modelfile").read_text(encoding="utf-8")
    assert text.startswith("FROM ./model.gguf\n")
    assert 'TEMPLATE """{{- if .System }}<|im_start|>system' in text
    assert 'PARAMETER stop "<|im_end|>"' in text
    assert "PARAMETER num_ctx 256" in text


def test_ollama_modelfile_says_when_the_template_is_not_known(models, tmp_path):
    from zoo.checkpoints import ollama

    path = zoo.export(models["qwen2"], tmp_path / "m.gguf", format="gguf", outtype="f16")
    assert "TEMPLATE" not in ollama.modelfile(path)
    assert ollama.go_template("{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}") is None


def test_zoo_export_command_writes_a_gguf(models, tmp_path, capsys):
    from recipes.cli import main

    folder = tmp_path / "hf"
    zoo.export(models["gpt2"], folder, format="huggingface")
    assert main(["export", str(folder), str(tmp_path / "g"), "--format", "gguf", "--outtype", "q8_0", "--ollama"]) == 0
    out = capsys.readouterr().out
    assert "model.gguf" in out and "Modelfile" in out
    again = zoo.from_pretrained(tmp_path / "g" / "model.gguf")
    assert again.backbone.vocabulary_size == models["gpt2"].backbone.vocabulary_size


def test_zoo_export_converts_a_gguf_to_a_hugging_face_folder(models, tmp_path, capsys):
    from recipes.cli import main

    model = models["llama"]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    assert main(["export", str(path), str(tmp_path / "hf"), "--format", "huggingface"]) == 0
    again = zoo.from_pretrained(tmp_path / "hf")
    x = inputs(model.backbone.vocabulary_size)
    np.testing.assert_allclose(_np(again(x)), _np(model(x)), rtol=0, atol=1e-6)
    assert again.backbone.get_config()["rope_scaling"] == model.backbone.get_config()["rope_scaling"]


# --- Against llama.cpp -------------------------------------------------------------------------


def greedy_zoo(model, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        x = np.array([ids], "int32")
        ids.append(int(np.argmax(_np(model({"token_ids": x, "padding_mask": np.ones_like(x)}))[0, -1])))
    return ids[len(prompt):]


@pytest.mark.integration
@pytest.mark.parametrize("mode,logit_error", [("int8", 0.03), ("int4", 0.5)])
def test_llama_cpp_runs_the_export_of_a_quantized_model_near_its_logits(quantizable, mode, logit_error, tmp_path):
    """llama.cpp on the default (q8_0 / q4_0) export of an int8 / int4 Llama: its logits are within the
    block type's error of the quantized model's."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[bench]')")
    model = zoo.from_pretrained(quantizable["llama"], quantize=mode)
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf")
    llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=model.backbone.max_sequence_length,
                          n_threads=1, type_k=0, type_v=0, verbose=False)
    try:
        ids = _np(model.tokenizer("The cat sat on the mat. naïve café")).tolist()
        llm.eval(ids)
        theirs = np.array(llm.scores[: len(ids)])
    finally:
        llm.close()
    x = np.array([ids], "int32")
    ours = _np(model({"token_ids": x, "padding_mask": np.ones_like(x)}))[0]
    relative = np.linalg.norm(theirs - ours) / np.linalg.norm(ours)
    assert relative < logit_error, relative


@pytest.mark.integration
@pytest.mark.parametrize("name", CASES)
def test_llama_cpp_reads_the_export_as_the_zoo_computes_it(models, name, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[bench]')")
    model = models[name]
    path = zoo.export(model, tmp_path / "m.gguf", format="gguf", outtype="f32")
    context = model.backbone.max_sequence_length
    # f32 key/value cache (llama.cpp's default is f16), one thread for a fixed summation order.
    llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=context, n_threads=1, type_k=0, type_v=0,
                          verbose=False)
    try:
        prompt = "The cat sat on the mat. naïve café 東京 🙂"
        if name.startswith("gemma"):  # its stand-in has no byte tokens, and llama.cpp aborts on a character outside it
            prompt = "the quick brown fox jumps over the lazy dog"
        ids = _np(model.tokenizer(prompt)).tolist()
        assert llm.tokenize(prompt.encode(), add_bos=True, special=False) == ids  # llama.cpp's tokenizer, same ids
        ids = ids[: context // 2]  # Mistral's window is 16, the GPT-2 stand-in's context 32
        llm.reset()
        llm.eval(ids)
        theirs = np.array(llm.scores[: len(ids)])
        x = np.array([ids], "int32")
        ours = _np(model({"token_ids": x, "padding_mask": np.ones_like(x)}))[0]
        tanh_gelu = name == "gpt2" or name.startswith("gemma")
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=GELU_TOLERANCE if tanh_gelu else 1e-4)
        steps = min(64, context - len(ids))
        generated = []
        for _ in range(steps):
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            generated.append(token)
            llm.eval([token])
        assert generated == greedy_zoo(model, ids, steps)
    finally:
        llm.close()


# --- What llama.cpp's own converter writes -----------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_gguf_from_llama_cpps_converter_loads_as_the_checkpoint_it_came_from(name, tmp_path):
    """tests/data/gguf/llama_cpp_*.gguf: convert_hf_to_gguf.py (f16) of a tiny checkpoint rebuilt here
    (see tests.checkpoints.llama_cpp_converted); its logits are the float64 reference's of the checkpoint's
    matrices rounded to float16, and its tokenizer gives the checkpoint's ids."""
    from safetensors.numpy import load_file

    from tests.checkpoints import llama_cpp_converted as converted

    folder = (converted.hf_llama if name == "llama" else converted.hf_gpt2)(tmp_path / "hf")
    lm = zoo.from_pretrained(converted.FOLDER / f"llama_cpp_{name}.gguf")
    original = zoo.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    # The converter's f16: matrices only (vectors and the position table stay f32).
    tensors = {k: v.astype(np.float16).astype(np.float32) if v.ndim == 2 and "wpe" not in k else v for k, v in tensors.items()}
    x = inputs(config["vocab_size"], length=10)
    if name == "llama":
        assert lm.backbone.get_config()["rope_scaling"] == config["rope_scaling"]  # recovered from rope_freqs
        expected = lc.reference_logits(tensors, config, x["token_ids"])
    else:
        expected = ck.gpt2_reference_logits(tensors, config, x["token_ids"])
    np.testing.assert_allclose(_np(lm(x)), expected, rtol=1e-4, atol=1e-4)
    for sentence in SENTENCES:
        assert _np(lm.tokenizer(sentence)).tolist() == _np(original.tokenizer(sentence)).tolist(), sentence


@pytest.mark.integration
def test_a_k_quant_file_from_llama_quantize_loads_as_llama_cpp_reads_it(tmp_path):
    """llama.cpp's own quantizer (Q4_K_M: Q4_K and Q6_K blocks of 256 values) on the f32 export; the zoo's
    dequantized model is far closer to llama.cpp on that file than the float model is (llama.cpp also
    rounds the activations to 8 bits in its K-quant products, so the two do not agree exactly)."""
    import ctypes

    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[bench]')")
    model = zoo.from_pretrained(lc.hf_folder(tmp_path / "hf", "qwen2", seed=3, hidden_size=256, intermediate_size=512,
                                             num_hidden_layers=1))
    source = zoo.export(model, tmp_path / "f32.gguf", format="gguf", outtype="f32")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, 1
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(tmp_path / "q4_k_m.gguf").encode(),
                                          ctypes.byref(params)) == 0
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "q4_k_m.gguf")).tensors}
    assert {"Q4_K", "Q6_K"} <= types
    quantized = zoo.from_pretrained(tmp_path / "q4_k_m.gguf")
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 300, 10)]
    llm = llama_cpp.Llama(model_path=str(tmp_path / "q4_k_m.gguf"), logits_all=True, n_ctx=64, n_threads=1,
                          type_k=0, type_v=0, verbose=False)
    try:
        llm.eval(ids)
        theirs = np.array(llm.scores[: len(ids)])
    finally:
        llm.close()
    x = {"token_ids": np.array([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32")}

    def distance(logits):
        return np.linalg.norm(logits - theirs) / np.linalg.norm(theirs)

    assert distance(_np(quantized(x))[0]) < 0.1
    assert distance(_np(quantized(x))[0]) < distance(_np(model(x))[0]) / 3


def test_without_the_gguf_package_the_export_names_the_extra(models, tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"GGUF export needs llama.cpp's gguf package, .*pip install -e '.\[gguf\]'"):
        zoo.export(models["qwen2"], tmp_path / "m.gguf", format="gguf")
    assert not any(tmp_path.iterdir())
