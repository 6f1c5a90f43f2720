"""From a trained run to its use, as a user would: each recipe trains a tiny
configuration in a subprocess (`zoo train NAME`), then a second, fresh
process loads `RUN/model.keras` after `import zoo` alone, with `zoo.load`
and with plain `keras.saving.load_model`, and uses it through the CLI
(`zoo sample / translate / classify / eval`).

`zoo eval RUN` in the fresh process must print the figure the recipe
printed last (the recipe's last step and `zoo eval` are one function), and
every run folder has the same layout. Two subprocesses in all (each start
imports TensorFlow), the five recipes in each."""

import csv
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
RECIPES = ("gpt_char", "demo", "translate", "bert_pretrain", "bert_classify")
LAYOUT = ("model.keras", "history.csv", "curves.png", "logs", "run.json")
METRIC = {"gpt_char": "val_loss", "demo": "val_accuracy", "translate": "val_bleu", "bert_pretrain": "val_loss",
          "bert_classify": "val_accuracy"}
TEXT = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain, again.\n\n" * 30
GERMAN = ["ein", "mann", "eine", "frau", "hund", "läuft", "spielt", "im", "park", "auf", "der", "straße"]
ENGLISH = ["a", "man", "a", "woman", "dog", "runs", "plays", "in", "park", "on", "the", "street"]
TINY = ["--epochs", "1", "--jit-compile", "false"]


def write_data(root):
    (root / "input.txt").write_text(TEXT, encoding="utf-8")
    rng = random.Random(0)
    pairs = root / "pairs"
    pairs.mkdir()
    for split, count in (("train", 48), ("val", 8), ("test", 6)):
        rows = [[rng.randrange(len(GERMAN)) for _ in range(rng.randint(2, 6))] for _ in range(count)]
        (pairs / f"{split}.de").write_text("".join(" ".join(GERMAN[i] for i in r) + " .\n" for r in rows), "utf-8")
        (pairs / f"{split}.en").write_text("".join(" ".join(ENGLISH[i] for i in r) + " .\n" for r in rows), "utf-8")
    sst = root / "sst"
    sst.mkdir()
    good, bad, filler = ["good", "great", "fun"], ["bad", "dull", "flat"], ["the", "film", "is", "a", "plot", "very"]
    for split, count in (("train", 96), ("dev", 20), ("test", 12)):
        lines = ["label\tsentence"]
        for _ in range(count):
            label = rng.randint(0, 1)
            words = rng.choices(filler, k=rng.randint(2, 6)) + [rng.choice(good if label else bad)]
            rng.shuffle(words)
            lines.append(f"{label}\t{' '.join(words)}")
        (sst / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def commands(root):
    runs = root / "runs"
    bert = ["--preset", "bert-tiny", "--hidden-dim", "16", "--intermediate-dim", "32", "--sequence-length", "16",
            "--batch-size", "16", "--vocabulary-size", "90", *TINY]
    return {
        "gpt_char": ["gpt-char", "--data", str(root / "input.txt"), "--preset", "nano", "--steps", "2",
                     "--steps-per-epoch", "1", "--batch-size", "2", "--eval-batches", "2", "--sample-length", "5",
                     "--jit-compile", "false"],
        "demo": ["demo", "--num-pairs", "300", "--batch-size", "32", "--num-samples", "1", *TINY],
        "translate": ["translate", "--data", str(root / "pairs"), "--preset", "transformer-tiny", "--batch-size", "8",
                      "--max-length", "12", "--vocabulary-size", "120", "--warmup-steps", "2",
                      "--intermediate-dim", "32", "--beam-size", "2", "--num-samples", "1", *TINY],
        "bert_pretrain": ["bert-pretrain", "--data", str(root / "sst"), *bert],
        "bert_classify": ["bert_classify", "--data", str(root / "sst"), "--pretrained", str(runs / "bert_pretrain"),
                          *bert[: bert.index("--hidden-dim")], *bert[bert.index("--sequence-length"):]],
    }


TRAIN = r"""
import contextlib, io, json, sys
from recipes import cli
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(["train", *argv, "--output", sys.argv[2] + "/" + name])
    out[name] = {"code": code, "lines": buffer.getvalue().strip().splitlines()[-2:]}
print("RESULT " + json.dumps(out))
"""

# A fresh process: `import zoo` alone before loading, then the CLI.
USE = r"""
import contextlib, io, json, sys
import numpy as np
import keras
import zoo
runs, root = sys.argv[1], sys.argv[2]
out = {}
for name in ("gpt_char", "demo", "translate", "bert_pretrain", "bert_classify"):
    path = f"{runs}/{name}/model.keras"
    a, b = zoo.load(path), keras.saving.load_model(path)
    out[name] = {
        "class": type(a).__name__,
        "tokenizer": type(a.tokenizer).__name__ if a.tokenizer is not None else None,
        "same_weights": all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights())),
        "compiled_loss": type(b.loss).__name__ if getattr(b, "loss", None) is not None else None,
    }
assert "recipes" not in sys.modules  # loading needed nothing but zoo
from recipes import cli

def run(*argv):
    buffer, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(errors):
        code = cli.main(list(argv))
    said = [line for line in errors.getvalue().strip().splitlines() if not line.startswith("zoo: compiling")]
    return code, buffer.getvalue().rstrip("\n").split("\n") + said[-1:]

for name in out:
    out[name]["eval"] = run("eval", f"{runs}/{name}")
out["gpt_char"]["use"] = run("sample", f"{runs}/gpt_char", "All:", "--max-length", "40", "--seed", "3")
out["gpt_char"]["train_split"] = run("eval", f"{runs}/gpt_char", "--split", "train")
out["demo"]["use"] = run("translate", f"{runs}/demo", "the small dog sees a big cat", "a child waited")
out["translate"]["use"] = run("translate", f"{runs}/translate", "ein mann läuft im park .")
out["translate"]["test_split"] = run("eval", f"{runs}/translate", "--split", "test")
out["bert_classify"]["use"] = run("classify", f"{runs}/bert_classify", "a good film", "dull plot",
                                  "--labels", "negative,positive")
out["bert_classify"]["test_split"] = run("eval", f"{runs}/bert_classify", "--data", f"{root}/sst", "--split", "test")
print("RESULT " + json.dumps(out))
"""


def _python(script, *args, timeout=900):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CI="1")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_data(root)
    trained = _python(TRAIN, json.dumps(commands(root)), str(root / "runs"))
    used = _python(USE, str(root / "runs"), str(root))
    return root / "runs", trained, used


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_writes_the_common_run_folder_and_its_model_reloads_and_is_used_in_a_fresh_process(runs, name):
    folder, trained, used = runs
    run, use = trained[name], used[name]
    # The run: exit 0, `run folder: RUN` then the figure, the common layout.
    assert run["code"] == 0, run
    metric = METRIC[name]
    assert run["lines"][0] == f"run folder: {folder / name}"
    assert run["lines"][1].startswith(f"{metric}=")
    printed = float(run["lines"][1].split("=")[1])
    for item in LAYOUT:
        assert (folder / name / item).exists(), item
    assert not (folder / name / "backup").exists()
    record = json.loads((folder / name / "run.json").read_text())
    assert record["finished"] and record["recipe"] == name and "model.keras" in record["files"]
    assert f"{record['results'][metric]:.4f}" == f"{printed:.4f}"
    with open(folder / name / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"step", "learning_rate", "loss"} <= set(rows[0])
    # The fresh process: zoo.load == keras.saving.load_model, with the tokenizer and compiled loss.
    assert use["same_weights"] and use["tokenizer"] is not None and use["compiled_loss"] is not None
    # zoo eval on the run's own data and split prints the recipe's figure again.
    code, lines = use["eval"]
    assert code == 0 and lines[-1] == run["lines"][1]


def test_size_overrides_are_echoed_and_recorded(runs):
    folder, _, _ = runs
    record = json.loads((folder / "bert_pretrain" / "run.json").read_text())
    assert record["overrides"] == {"hidden_dim": 16, "intermediate_dim": 32} and record["preset"] == "bert-tiny"
    assert json.loads((folder / "bert_classify" / "run.json").read_text())["overrides"] == {}
    assert json.loads((folder / "translate" / "run.json").read_text())["overrides"] == {"intermediate_dim": 32}


def test_zoo_sample_continues_a_prompt_past_nothing_but_the_models_characters(runs):
    _, _, used = runs
    code, lines = used["gpt_char"]["use"]
    text = "\n".join(lines)
    assert code == 0 and text.startswith("All:")
    assert set(text) <= set(TEXT)
    code, lines = used["gpt_char"]["train_split"]
    assert code == 0 and lines[-1].startswith("train_loss=")  # the figure is named after its split


def test_zoo_translate_and_classify_answer_each_sentence(runs):
    _, _, used = runs
    code, lines = used["demo"]["use"]
    assert code == 0 and len(lines) == 2
    code, lines = used["translate"]["use"]
    assert code == 0 and len(lines) == 1
    code, lines = used["bert_classify"]["use"]
    assert code == 0 and len(lines) == 2
    for line, sentence in zip(lines, ("a good film", "dull plot")):
        label, probability, text = line.split("\t")
        assert label in ("negative", "positive") and 0.5 <= float(probability) <= 1.0 and text == sentence


def test_zoo_eval_on_another_split_and_data(runs):
    folder, _, used = runs
    for name in ("translate", "bert_classify"):
        code, lines = used[name]["test_split"]
        metric = METRIC[name].replace("val_", "test_")  # every figure names its split
        assert code == 0 and lines[-1].startswith(metric + "=")
        figures = json.loads((folder / name / "run.json").read_text())["figures"]
        assert figures["test"][metric] == pytest.approx(float(lines[-1].split("=")[1]), abs=5e-5)
        assert METRIC[name] in figures["val" if name == "translate" else "dev"]  # the validation figures stay
    code, lines = used["translate"]["test_split"]
    assert [line.split("=")[0] for line in lines[:3]] == ["test_bleu_lowercase", "test_chrf", "test_bleu"]