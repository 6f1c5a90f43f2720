"""Quantized zoo models (`model.quantize(mode)`): every family and task in
every mode Keras quantizes without calibration data (int8, int4, float8)
reloads to the same outputs with its tokenizer, generates with its cache
as greedy decoding does without it, writes a file smaller by the expected
factor, and prints no warning; a float model's config is as before."""

import string
import warnings
import zipfile

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs
from tests.checkpoints import stand_ins
from zoo.tokenizers import CharTokenizer, train_word_piece
from zoo import generate
from zoo.models import QUANTIZATION_MODES, quantization_mode

SENTENCES = ["a gripping film", "a dull plot", "the acting is superb", "two dogs run in the snow"]


@pytest.fixture(scope="module")
def tokenizers():
    pytest.importorskip("tensorflow", reason="keras-hub's WordPiece tokenizer needs TensorFlow, which is not installed")
    return {
        "chars": CharTokenizer.from_text(string.ascii_letters + " \n!$&',-.3:;?"),
        "word_piece": train_word_piece(SENTENCES * 8, vocabulary_size=120),
    }


def build(name, task, tokenizers):
    """A tiny model of each task, with the tokenizer of its recipe where it has one."""
    if name == "gpt-nano":
        chars = tokenizers["chars"]
        return zoo.build(name, task=task, vocabulary_size=chars.vocabulary_size(), tokenizer=chars)
    word_piece = tokenizers["word_piece"]
    size = word_piece.vocabulary_size()
    if name == "transformer-tiny":
        return zoo.build(name, vocabulary_size=size, source_vocabulary_size=size, tokenizer=word_piece)
    extra = {"num_classes": 3} if task == "classifier" else {}
    return zoo.build(name, task=task, vocabulary_size=size, tokenizer=word_piece, **extra)


def inputs_of(model):
    if "encoder_token_ids" in model.input:
        return seq2seq_inputs(vocab=model.vocabulary_size)
    if "segment_ids" in model.input:
        inputs = bert_inputs(vocab=model.backbone.vocabulary_size if hasattr(model, "backbone") else model.vocabulary_size)
        if "mask_positions" in model.input:
            inputs["mask_positions"] = np.array([[1, 3], [2, 5]], "int32")
        return inputs
    return gpt_inputs(vocab=model.vocabulary_size)


def quantize_quietly(model, mode):
    """`model.quantize(mode)`, failing on any warning it gives (NumPy's
    DeprecationWarnings about TensorFlow's `__array__` aside: Python hides
    those from users)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.quantize(mode)
    shown = [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert not shown, shown


TASKS = [("gpt-nano", None), ("gpt-nano", "causal_lm"), ("bert-tiny", None), ("bert-tiny", "masked_lm"),
         ("bert-tiny", "classifier"), ("bert-tiny", "sentence_encoder"), ("transformer-tiny", None)]
CASES = [(name, task, "int8") for name, task in TASKS] + [
    (name, task, mode) for mode in ("int4", "float8")
    for name, task in (("gpt-nano", "causal_lm"), ("bert-tiny", "classifier"), ("transformer-tiny", None))
]


@pytest.mark.parametrize("name, task, mode", CASES)
def test_a_quantized_model_reloads_with_the_same_outputs_and_tokenizer(name, task, mode, tokenizers, tmp_path):
    model = build(name, task, tokenizers)
    inputs = inputs_of(model)
    float_outputs = keras.tree.map_structure(np.asarray, model(inputs))
    quantize_quietly(model, mode)
    outputs = keras.tree.map_structure(np.asarray, model(inputs))
    assert quantization_mode(model) == mode
    path = zoo.save(model, tmp_path / "q.keras")
    for reloaded in (zoo.load(path), keras.saving.load_model(path)):
        assert quantization_mode(reloaded) == mode
        keras.tree.map_structure(
            lambda a, b: np.testing.assert_allclose(np.asarray(b), a, rtol=0, atol=1e-6), outputs, reloaded(inputs)
        )
        assert reloaded.tokenizer.get_config() == model.tokenizer.get_config()
    # The quantized model computes something else than the float one (the weights did change).
    assert any(not np.array_equal(a, b) for a, b in zip(keras.tree.flatten(float_outputs), keras.tree.flatten(outputs)))


@pytest.mark.integration  # generate, classify and translate, each before and after a reload
def test_text_functions_give_the_same_text_after_reloading(tokenizers, tmp_path, mode="int8"):
    lm, classifier, translator = (build("gpt-nano", "causal_lm", tokenizers),
                                  build("bert-tiny", "classifier", tokenizers), build("transformer-tiny", None, tokenizers))
    for model in (lm, classifier, translator):
        quantize_quietly(model, mode)

    def uses(lm, classifier, translator):
        return (zoo.generate(lm, "ROMEO:", max_length=12, sampler="greedy"),
                zoo.classify(classifier, SENTENCES[:2]).probabilities,
                zoo.translate(translator, SENTENCES[:2], max_length=6, num_beams=2))

    before = uses(lm, classifier, translator)
    reloaded = [zoo.load(zoo.save(m, tmp_path / f"{i}.keras")) for i, m in enumerate((lm, classifier, translator))]
    after = uses(*reloaded)
    assert after[0] == before[0] and after[2] == before[2]
    np.testing.assert_allclose(after[1], before[1], rtol=0, atol=1e-6)


def greedy_without_cache(model, prompt, steps, source=None):
    """Greedy decoding by full forward passes: the argmax of the last
    position, one token at a time."""
    ids = list(prompt)
    for _ in range(steps):
        if source is None:
            logits = model({"token_ids": np.array([ids], "int32")})
        else:
            logits = model({
                "encoder_token_ids": np.array([source], "int32"), "encoder_padding_mask": np.ones((1, len(source)), "int32"),
                "decoder_token_ids": np.array([ids], "int32"), "decoder_padding_mask": np.ones((1, len(ids)), "int32"),
            })
        ids.append(int(np.argmax(np.asarray(logits)[0, -1])))
    return ids[len(prompt):]


@pytest.mark.parametrize("mode", QUANTIZATION_MODES)
@pytest.mark.parametrize("name", ["gpt-nano", "transformer-tiny"])
def test_cached_generation_of_a_quantized_model_is_its_greedy_decoding(name, mode):
    model = zoo.build(name, **({"task": "causal_lm"} if name == "gpt-nano" else {}))
    quantize_quietly(model, mode)
    steps = 8
    if name == "gpt-nano":
        prompt, source = [5, 17, 3, 42], None
        cached = generate(model, [prompt], max_new_tokens=steps).sequences[0]
    else:
        prompt, source = [1], [7, 300, 12, 999, 4]
        cached = generate(model, [prompt], max_new_tokens=steps, source=[source]).sequences[0]
    assert list(cached) == greedy_without_cache(model, prompt, steps, source)


def test_a_quantized_file_is_smaller_by_the_expected_factor(tmp_path):
    """A GPT whose weights dominate its file: int8 holds a byte a weight, int4
    half a byte (plus a float scale per output unit); float8 keeps float
    weights (Keras' float8 is a way of computing) and adds its scales."""
    sizes = dict(task="causal_lm", vocabulary_size=2048, hidden_dim=256, intermediate_dim=1024, num_heads=4)
    paths = {}
    for mode in (None, *QUANTIZATION_MODES):
        model = zoo.build("gpt-nano", **sizes)
        if mode:
            quantize_quietly(model, mode)
        paths[mode] = zoo.save(model, tmp_path / f"{mode}.keras")
    size = {mode: path.stat().st_size for mode, path in paths.items()}
    assert size[None] / size["int8"] > 3.5, size
    assert size[None] / size["int4"] > 6, size
    assert size["float8"] >= size[None], size


@pytest.mark.parametrize("name, task", TASKS)
def test_a_float_model_config_has_no_quantization_entry(name, task, tokenizers, tmp_path):
    model = build(name, task, tokenizers)
    with zipfile.ZipFile(zoo.save(model, tmp_path / "f.keras")) as archive:
        text = archive.read("config.json").decode()
    assert '"quantization"' not in text
    assert "quantization" not in model.get_config()


def test_from_pretrained_quantizes_after_loading(tmp_path):
    folder = stand_ins.hf_gpt2_folder(tmp_path / "gpt2")
    quantized = zoo.from_pretrained(folder, quantize="int8")
    expected = zoo.from_pretrained(folder)
    expected.quantize("int8")
    inputs = {"token_ids": np.array([[5, 6, 7, 8]], "int32")}
    assert quantization_mode(quantized) == "int8"
    np.testing.assert_allclose(np.asarray(quantized(inputs)), np.asarray(expected(inputs)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode, message", [
    ("int3", r"quantize: mode='int3' is not supported; expected one of 'int8', 'int4', 'float8'\.$"),
    ("gptq", r"mode='gptq' is not supported \(Keras' GPTQ and AWQ need calibration data.*\); expected one of 'int8'"),
])
def test_an_unsupported_mode_names_the_modes_before_any_work(mode, message, tmp_path):
    model = zoo.build("gpt-nano", task="causal_lm")
    with pytest.raises(ValueError, match=message):
        model.quantize(mode)
    assert quantization_mode(model) is None
    with pytest.raises(ValueError, match=message):  # before the folder is read: there is none
        zoo.from_pretrained(tmp_path / "no_such_folder", quantize=mode)


def test_quantizing_twice_is_refused():
    model = zoo.build("gpt-nano", task="causal_lm")
    model.quantize("int8")
    with pytest.raises(ValueError, match=r"GPTCausalLM is already quantized \(.*\); expected a float model"):
        model.quantize("int4")


def test_a_config_naming_a_layer_the_model_lacks_is_refused():
    model = zoo.build("bert-tiny", task="classifier", num_classes=2)
    model.quantize("int8")
    config = model.get_config()
    config["quantization"] = {"no_such_layer": "int8_from_float32", **config["quantization"]}
    with pytest.raises(ValueError, match=r"the config names the layer 'no_such_layer', which this BertClassifier"):
        type(model).from_config(config)
