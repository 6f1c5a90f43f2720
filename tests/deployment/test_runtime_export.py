"""zoo.export to TensorFlow SavedModel, ONNX and LiteRT: each runtime gives
Keras' outputs, at two lengths and on padded batches from one export."""

import subprocess
import sys

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs
from zoo.deployment import ExportError

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="exports for runtimes run on the TensorFlow backend"
)
FORMATS = ("tf_saved_model", "onnx", "litert")
ATOL = 1e-4


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _bert_masked(length, seed):
    inputs = bert_inputs(length=length, seed=seed, lengths=[length, length - 2])
    inputs["mask_positions"] = np.array([[1, 2], [0, length - 3]], "int32")
    return inputs


def _seq2seq(length, seed):
    inputs = seq2seq_inputs(source_length=length + 1, target_length=length, seed=seed, source_lengths=[length + 1, 3])
    inputs["decoder_padding_mask"][1, -2:] = 0
    return inputs


def _padded_gpt(length, seed):
    inputs = gpt_inputs(length=length, vocab=60, seed=seed)
    inputs["padding_mask"][1, -3:] = 0
    return inputs


# task -> (build, inputs(length, seed)); the second row of each batch is padded.
TASKS = {
    "gpt-causal_lm": (lambda: zoo.build("gpt-nano", task="causal_lm"), _padded_gpt),
    "llama-causal_lm": (lambda: zoo.build("llama-nano", task="causal_lm"), _padded_gpt),
    "bert-classifier": (lambda: zoo.build("bert-tiny", task="classifier", num_classes=3),
                        lambda length, seed: bert_inputs(length=length, seed=seed, lengths=[length, 3])),
    "bert-masked_lm": (lambda: zoo.build("bert-tiny", task="masked_lm"), _bert_masked),
    "bert-sentence_encoder": (lambda: zoo.build("bert-tiny", task="sentence_encoder"),
                              lambda length, seed: bert_inputs(length=length, seed=seed, lengths=[length, 4])),
    "transformer-forward": (lambda: zoo.build("transformer-tiny"), _seq2seq),
}


class Runtime:
    """One exported model read by its own runtime: outputs for a dict of inputs."""

    def __init__(self, folder, format):
        self.format = format
        if format == "tf_saved_model":
            import tensorflow as tf

            self.loaded = tf.saved_model.load(str(folder))
        elif format == "onnx":
            import onnxruntime

            self.session = onnxruntime.InferenceSession(str(folder / "model.onnx"))
        else:
            from ai_edge_litert.interpreter import Interpreter

            self.interpreter = Interpreter(model_path=str(folder / "model.tflite"))

    def input_names(self):
        if self.format == "tf_saved_model":
            return sorted(self.loaded.signatures["serve"].structured_input_signature[1])
        if self.format == "onnx":
            return sorted(i.name for i in self.session.get_inputs())
        return sorted(self.interpreter.get_signature_list()["serving_default"]["inputs"])

    def __call__(self, inputs):
        if self.format == "tf_saved_model":
            return _np(self.loaded.serve(inputs))
        if self.format == "onnx":
            return self.session.run(None, inputs)[0]
        outputs = self.interpreter.get_signature_runner()(**inputs)
        return next(iter(outputs.values()))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(task, format) -> (model, Runtime): each task's model built once, each export made once."""
    models, runtimes = {}, {}

    def get(task, format):
        if task not in models:
            keras.utils.set_random_seed(7)
            models[task] = TASKS[task][0]()
            models[task](TASKS[task][1](6, 0))
        if (task, format) not in runtimes:
            folder = zoo.export(models[task], tmp_path_factory.mktemp(task) / format, format=format)
            runtimes[task, format] = Runtime(folder, format)
        return models[task], runtimes[task, format]

    return get


@pytest.mark.integration
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("task", TASKS)
def test_the_runtime_gives_keras_outputs_at_two_lengths(task, format, exported):
    model, runtime = exported(task, format)
    assert runtime.input_names() == sorted(t.name for t in model.inputs)  # named as the model's inputs
    for length, seed in ((6, 1), (11, 2)):  # one export, two lengths: the dimensions are dynamic
        inputs = TASKS[task][1](length, seed)
        expected = _np(model(inputs, training=False))
        got = runtime(inputs)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=ATOL)


@pytest.mark.integration
@pytest.mark.parametrize("preset", ["gpt-nano", "llama-nano"])
def test_greedy_decoding_on_onnxruntime_gives_zoo_generate_tokens(preset, tmp_path):
    import onnxruntime

    keras.utils.set_random_seed(3)
    model = zoo.build(preset, task="causal_lm")
    prompt = [5, 17, 9]
    expected = zoo.generate(model, [prompt], max_new_tokens=10).sequences[0]
    session = onnxruntime.InferenceSession(str(zoo.export(model, tmp_path / "lm", format="onnx") / "model.onnx"))
    tokens = list(prompt)
    for _ in range(10):  # the plain loop: the whole sequence each step, the last position's argmax
        ids = np.array([tokens], "int32")
        logits = session.run(None, {"token_ids": ids, "padding_mask": np.ones_like(ids)})[0]
        tokens.append(int(logits[0, -1].argmax()))
    assert tokens[len(prompt):] == [int(t) for t in expected]


def _word_piece_classifier():
    from zoo.tokenizers import train_word_piece

    texts = ["a gripping film", "a dull film", "what a wonderful movie", "boring and slow", "gripping and wonderful"]
    tokenizer = train_word_piece(texts, vocabulary_size=60)
    keras.utils.set_random_seed(5)
    return zoo.build("bert-tiny", "classifier", num_classes=2, vocabulary_size=tokenizer.vocabulary_size(),
                     tokenizer=tokenizer)


@pytest.mark.integration
def test_the_savedmodel_classifies_text_as_zoo_classify_does(tmp_path):
    import tensorflow as tf

    classifier = _word_piece_classifier()
    sentences = ["a gripping film", "dull", "what a wonderful and gripping movie it was, boring and slow"]
    expected = zoo.classify(classifier, sentences)
    folder = zoo.export(classifier, tmp_path / "sst", format="tf_saved_model")
    del classifier
    loaded = tf.saved_model.load(str(folder))  # no zoo, no Python tokenizer: the graph tokenizes
    result = loaded.signatures["classify_text"](sentences=tf.constant(sentences))
    np.testing.assert_allclose(result["probabilities"].numpy(), expected.probabilities, atol=1e-5)
    assert result["labels"].numpy().tolist() == expected.labels
    assert (folder / "assets.extra" / "vocab.txt").is_file()


@pytest.mark.integration
@pytest.mark.parametrize("format", ["onnx", "litert"])
def test_formats_without_the_tokenizer_get_its_files_beside(format, tmp_path):
    classifier = _word_piece_classifier()
    folder = zoo.export(classifier, tmp_path / format, format=format)
    vocabulary = (folder / "vocab.txt").read_text().splitlines()
    assert vocabulary == classifier.tokenizer.get_vocabulary()
    assert (folder / "tokenizer_config.json").is_file()


@pytest.mark.integration
@pytest.mark.parametrize("format", ["tf_saved_model", "onnx"])
def test_an_int8_model_exports_with_its_outputs(format, tmp_path):
    keras.utils.set_random_seed(11)
    model = zoo.build("gpt-nano", task="causal_lm")
    model.quantize("int8")
    inputs = _padded_gpt(7, 4)
    expected = _np(model(inputs, training=False))
    runtime = Runtime(zoo.export(model, tmp_path / "q", format=format), format)
    np.testing.assert_allclose(runtime(inputs), expected, atol=ATOL)


@pytest.mark.parametrize("format, mode", [("litert", "int8"), ("onnx", "float8")])
def test_a_quantized_model_a_format_cannot_carry_is_refused_in_one_line(format, mode, tmp_path):
    model = zoo.build("gpt-nano", task="causal_lm")
    model(gpt_inputs(vocab=60))
    model.quantize(mode)
    with pytest.raises(ExportError, match=f"quantized \\({mode}\\).*expected a float"):
        zoo.export(model, tmp_path / "q", format=format)
    assert not (tmp_path / "q").exists() and list(tmp_path.iterdir()) == []


def test_bad_format_and_existing_folder_are_refused_before_any_work(tmp_path):
    model = zoo.build("gpt-nano", task="causal_lm")
    with pytest.raises(ValueError, match="format='tflite'; expected one of .*'litert'"):
        zoo.export(model, tmp_path / "a", format="tflite")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        zoo.export(model, tmp_path / "b", format="onnx")
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"


@pytest.mark.integration
def test_zoo_export_writes_a_keras_file_for_onnxruntime(tmp_path):
    import onnxruntime

    model = zoo.build("gpt-nano", task="causal_lm")
    inputs = _padded_gpt(5, 9)
    expected = _np(model(inputs, training=False))
    model.save(tmp_path / "lm.keras")
    done = subprocess.run(
        [sys.executable, "-m", "recipes.cli", "export", str(tmp_path / "lm.keras"), str(tmp_path / "out"),
         "--format", "onnx"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "model.onnx" in done.stdout
    session = onnxruntime.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    np.testing.assert_allclose(session.run(None, inputs)[0], expected, atol=ATOL)
