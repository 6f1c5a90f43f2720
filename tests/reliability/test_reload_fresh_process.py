"""Everything the zoo writes reloads in a new Python process after
`import zoo` alone: compiled models with the zoo's losses, metrics and
learning-rate schedules, with the tokenizer they carry, through `zoo.load`
and plain `keras.saving.load_model`; and `import zoo` (with a char model
loaded and used) does not import TensorFlow on another backend."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

import zoo
from zoo.tokenizers import CharTokenizer, WordTokenizer, train_word_piece
from zoo.tokenizers import token_id_lists
from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy, TransformerSchedule, WarmupCosineDecay, adamw

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n"
SENTENCES = ["a dog runs in the park", "zwei hunde laufen über die straße", "the cat sat", "ein hund läuft"]
PROBES = ["the dog runs", "über die straße läuft", "naïve"]


def _fit_one_step(model, inputs, labels):
    """Optimizer state to save (as after 3 steps, without tracing a train
    step); the compiled loss of the model."""
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(3)
    return float(keras.ops.convert_to_numpy(model.loss(labels, model(inputs, training=False))))


def _gpt(folder):
    """gpt-nano on characters, AdamW on nanoGPT's warm-up + cosine schedule, masked loss and accuracy."""
    tokenizer = CharTokenizer.from_text(TEXT)
    model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    model.compile(
        optimizer=adamw(WarmupCosineDecay(1e-3, 2, 10, 1e-4), model=model),
        loss=MaskedSparseCrossentropy(pad_id=0),
        metrics=[MaskedAccuracy(pad_id=0)],
        jit_compile=False,
    )
    ids = np.asarray(tokenizer(TEXT[:33]))
    inputs = {"token_ids": ids[None, :-1], "padding_mask": np.ones((1, 32), "int32")}
    loss = _fit_one_step(model, inputs, ids[None, 1:])
    zoo.save(model, folder / "gpt.keras")
    return model, inputs, ids[None, 1:], loss, ["ROMEO", "light"]


def _transformer(folder):
    """transformer-tiny on words, Adam on Vaswani's schedule, label smoothing."""
    tokenizer = WordTokenizer.from_texts(SENTENCES)
    model = zoo.build("transformer-tiny", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    model.compile(
        optimizer=keras.optimizers.Adam(TransformerSchedule(32, warmup_steps=4), beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCrossentropy(pad_id=0, label_smoothing=0.1),
        metrics=[MaskedAccuracy(pad_id=0)],
        jit_compile=False,
    )
    source = np.array([tokenizer("a dog runs in the park")], "int32")
    target = np.array([[1] + tokenizer("zwei hunde laufen").tolist()], "int32")
    inputs = {
        "encoder_token_ids": source,
        "encoder_padding_mask": np.ones_like(source),
        "decoder_token_ids": target[:, :-1],
        "decoder_padding_mask": np.ones_like(target[:, :-1]),
    }
    loss = _fit_one_step(model, inputs, target[:, 1:])
    zoo.save(model, folder / "transformer.keras")
    return model, inputs, target[:, 1:], loss, PROBES


def _bert(folder):
    """A bert-tiny classifier with a WordPiece tokenizer (keras-hub)."""
    tokenizer = train_word_piece(SENTENCES * 2, vocabulary_size=80)
    model = zoo.build("bert-tiny", "classifier", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    model.compile(
        optimizer=adamw(WarmupCosineDecay(1e-3, 1, 4, 0.0), model=model),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=False,
    )
    ids = np.array([[5] + token_id_lists(tokenizer, ["the cat sat"])[0] + [6]], "int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    loss = _fit_one_step(model, inputs, np.array([1]))
    zoo.save(model, folder / "bert.keras")
    return model, inputs, np.array([1]), loss, PROBES


CHILD = """
import json, sys
import numpy as np
import keras
import zoo

out = {}
for name, expected in json.loads(sys.argv[1]).items():
    for loader in ("zoo.load", "keras.saving.load_model"):
        model = zoo.load(expected["path"]) if loader == "zoo.load" else keras.saving.load_model(expected["path"])
        data = np.load(expected["arrays"])
        inputs = {k[len("x_"):]: data[k] for k in data.files if k.startswith("x_")}
        outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
        rows = model.tokenizer(expected["probes"])
        rows = rows.to_list() if hasattr(rows, "to_list") else rows
        loss = keras.ops.convert_to_numpy(model.loss(data["y"], outputs))
        out[f"{name} {loader}"] = {
            "max_difference": float(np.max(np.abs(outputs - data["outputs"]))),
            "tokens": [[int(t) for t in row] for row in rows],
            "tokenizer": type(model.tokenizer).__name__,
            "loss": type(model.loss).__name__,
            "schedule": type(model.optimizer.learning_rate).__name__
            if not hasattr(model.optimizer, "_learning_rate") else type(model.optimizer._learning_rate).__name__,
            "iterations": int(model.optimizer.iterations.numpy() if hasattr(model.optimizer.iterations, "numpy")
                              else model.optimizer.iterations),
            "metrics": [m if isinstance(m, str) else type(m).__name__ for m in model._compile_metrics._user_metrics],
            "compiled_loss": float(loss),
        }
print("RESULT " + json.dumps(out))
"""


def _run(code, *args, backend=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=backend or keras.backend.backend())
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    keras.utils.set_random_seed(0)
    models = {}
    for name, make in (("gpt", _gpt), ("transformer", _transformer), ("bert", _bert)):
        model, inputs, labels, loss, probes = make(folder)
        arrays = folder / f"{name}.npz"
        outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
        np.savez(arrays, outputs=outputs, y=labels, **{f"x_{k}": v for k, v in inputs.items()})
        models[name] = {
            "path": str(folder / f"{name}.keras"),
            "arrays": str(arrays),
            "probes": probes,
            "tokens": token_id_lists(model.tokenizer, probes),
            "tokenizer": type(model.tokenizer).__name__,
            "loss": type(model.loss).__name__,
            "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            "compiled_loss": loss,
        }
    return models


def test_compiled_models_reload_in_a_fresh_process_after_import_zoo_alone(saved):
    result = _run(CHILD, json.dumps(saved))
    assert len(result) == 6
    schedules = {"gpt": "WarmupCosineDecay", "transformer": "TransformerSchedule", "bert": "WarmupCosineDecay"}
    for key, got in result.items():
        name = key.split()[0]
        expected = saved[name]
        assert got["max_difference"] == 0.0, key  # the same weights, the same outputs
        assert got["tokens"] == expected["tokens"], key  # the same tokenizer
        assert got["tokenizer"] == expected["tokenizer"], key
        assert got["loss"] == expected["loss"], key  # compiled: the loss, the schedule, the optimizer's state
        assert got["schedule"] == schedules[name], key
        assert name == "bert" or got["metrics"] == ["MaskedAccuracy"], key
        assert got["iterations"] == expected["iterations"] == 3, key
        np.testing.assert_allclose(got["compiled_loss"], expected["compiled_loss"], rtol=1e-6, err_msg=key)


def test_import_zoo_and_a_char_model_need_no_tensorflow_on_jax(saved):
    pytest.importorskip("jax")
    code = """
    import json, sys
    import numpy as np
    import zoo

    after_import = "tensorflow" in sys.modules
    model = zoo.load(sys.argv[1])
    data = np.load(sys.argv[2])
    outputs = np.asarray(model({k[2:]: data[k] for k in data.files if k.startswith("x_")}))
    text = model.tokenizer.detokenize(model.tokenizer("ROMEO"))
    print("RESULT " + json.dumps({
        "after_import": after_import,
        "after_use": "tensorflow" in sys.modules,
        "max_difference": float(np.max(np.abs(outputs - data["outputs"]))),
        "text": text,
    }))
    """
    result = _run(code, saved["gpt"]["path"], saved["gpt"]["arrays"], backend="jax")
    assert result == {"after_import": False, "after_use": False, "max_difference": result["max_difference"], "text": "ROMEO"}
    assert result["max_difference"] < 1e-5  # another backend: the same model up to float rounding
