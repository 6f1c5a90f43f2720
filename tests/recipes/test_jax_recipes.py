"""Every recipe runs on JAX: its smallest configuration, one fresh
interpreter per recipe under `KERAS_BACKEND=jax` (the input pipelines stay
on tf.data on the CPU), each ending with its `val_...=` line; gpt_char runs
as on a GPU: under `--strategy data-parallel` (`keras.distribution.DataParallel`,
here over the CPU's one device) and `--mixed-precision` (bfloat16 logits);
translate under `--strategy model-parallel --mesh 1x2` on two virtual CPU
devices, its kernels split in two.

The five runs go two at a time, so the file takes about as long as the
three slowest runs.
"""

import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINAL_LINE = re.compile(r"^val_(loss|accuracy|bleu)=-?\d+\.\d{4}$")
# Runs the recipe's main, then reports the distribution it trained under.
RUN = (
    "import importlib, sys, keras\n"
    "importlib.import_module('recipes.' + sys.argv[1]).main(sys.argv[2:])\n"
    "print('distribution:', type(keras.distribution.distribution()).__name__)\n"
)


def write_data(folder):
    """Tiny inputs of each recipe: a text, German-English pairs, SST-2 TSVs."""
    rng = random.Random(0)
    text = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain.\n\n" * 30
    (folder / "input.txt").write_text(text, encoding="utf-8")
    german = ["ein", "mann", "eine", "frau", "hund", "läuft", "spielt", "im", "park", "auf", "der", "straße"]
    english = ["a", "man", "a", "woman", "dog", "runs", "plays", "in", "park", "on", "the", "street"]
    pairs = folder / "pairs"
    pairs.mkdir()
    for split, count in (("train", 64), ("val", 12)):
        rows = [[rng.randrange(len(german)) for _ in range(rng.randint(2, 7))] for _ in range(count)]
        (pairs / f"{split}.de").write_text("".join(" ".join(german[i] for i in r) + " .\n" for r in rows), "utf-8")
        (pairs / f"{split}.en").write_text("".join(" ".join(english[i] for i in r) + " .\n" for r in rows), "utf-8")
    sst2 = folder / "sst2"
    sst2.mkdir()
    words = {0: ["bad", "dull", "boring", "flat"], 1: ["good", "great", "fun", "moving"]}
    filler = ["the", "film", "is", "a", "story", "very", "and", "plot", "acting"]
    for split, count in (("train", 160), ("dev", 36)):
        rows = []
        for _ in range(count):
            label = rng.randint(0, 1)
            sentence = rng.choices(filler, k=rng.randint(2, 8)) + [rng.choice(words[label])]
            rng.shuffle(sentence)
            rows.append(f"{label}\t{' '.join(sentence)}")
        (sst2 / f"{split}.tsv").write_text("label\tsentence\n" + "\n".join(rows) + "\n", encoding="utf-8")


def commands(folder):
    bert = ["--preset", "bert-tiny", "--num-layers", "1", "--hidden-dim", "16", "--intermediate-dim", "32",
            "--sequence-length", "16", "--batch-size", "16", "--epochs", "1", "--vocabulary-size", "100"]
    return {
        "demo": ["--num-pairs", "200", "--epochs", "1", "--batch-size", "32", "--num-samples", "1",
                 "--num-layers", "1"],
        "gpt_char": ["--data", folder / "input.txt", "--preset", "nano", "--steps", "2", "--steps-per-epoch", "2",
                     "--batch-size", "4", "--eval-batches", "1", "--sample-length", "4", "--num-layers", "1",
                     "--strategy", "data-parallel", "--mixed-precision"],
        "translate": ["--data", folder / "pairs", "--preset", "transformer-tiny", "--epochs", "1", "--batch-size", "8",
                      "--max-length", "16", "--vocabulary-size", "200", "--warmup-steps", "5", "--num-layers", "1",
                      "--intermediate-dim", "64", "--beam-size", "2", "--strategy", "model-parallel", "--mesh", "1x2"],
        "bert_pretrain": ["--data", folder / "sst2", *bert],
        "bert_classify": ["--data", folder / "sst2", *bert],
    }


def run(name, argv, folder):
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    if "model-parallel" in argv:  # two virtual CPU devices for a 1x2 mesh
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    args = [sys.executable, "-c", RUN, name, *map(str, argv), "--output", str(folder / name)]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jax_recipes")
    write_data(folder)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run, name, argv, folder) for name, argv in commands(folder).items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.integration
@pytest.mark.parametrize("name", ["demo", "gpt_char", "translate", "bert_pretrain", "bert_classify"])
def test_recipe_runs_on_jax(finished, name):
    result = finished[name]
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("distribution: ")
    assert FINAL_LINE.match(lines[-2]), lines[-5:]
    # gpt_char: --strategy data-parallel; translate: --strategy model-parallel over two devices
    expected = {"gpt_char": "DataParallel", "translate": "ModelParallel"}.get(name, "NoneType")
    assert lines[-1] == f"distribution: {expected}"


def test_a_tensorflow_only_strategy_is_one_clear_error_on_jax():
    script = (
        "from zoo.training.distribution import check_strategy\n"
        "for name in ('default', 'data-parallel', 'mirrored', 'tpu', 'multi-worker'):\n"
        "    try:\n"
        "        check_strategy(name); print(name, 'ok')\n"
        "    except ValueError as error:\n"
        "        print(name, error)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[:3] == ["default ok", "data-parallel ok", "mirrored ok"]
    assert len(lines) == 5
    for line, name in zip(lines[3:], ("tpu", "multi-worker")):
        assert line == (f"{name} --strategy {name} needs the TensorFlow backend (KERAS_BACKEND=tensorflow); "
                        "on jax use 'default' or 'data-parallel'."), line
