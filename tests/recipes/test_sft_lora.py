"""`zoo train sft` with the memory levers: a LoRA run and a QLoRA (int8)
run of a tiny random Qwen2-layout checkpoint with a ChatML template save
run folders that reload as trained (adapters, quantization, template,
validation loss), and `zoo export --format huggingface` of the LoRA run
writes the template into tokenizer_config.json and merged weights that
reload through `zoo.from_pretrained` with the run's logits.
"""

import contextlib
import io
import json

import numpy as np
import pytest

import zoo
from recipes import cli, sft
from tests.checkpoints import stand_ins
from tests.recipes.test_sft import conversations, write_jsonl
from zoo.tokenizers import CHATML

FLAGS = ["--steps", "2", "--batch-size", "4", "--sequence-length", "32", "--steps-per-epoch", "2",
         "--learning-rate", "1e-2", "--warmup-steps", "0", "--eval-batches", "1", "--sample-length", "0",
         "--jit-compile", "false", "--lora", "2"]
INPUTS = {"token_ids": np.arange(24, dtype="int32").reshape(2, 12) % 50, "padding_mask": np.ones((2, 12), "int32")}


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    return stand_ins.chat_folder(tmp_path_factory.mktemp("qwen") / "qwen2-chat")


def train(chat_folder, root, *levers):
    """An sft run with `levers`: (run folder, the val_loss it printed)."""
    data = write_jsonl(root / "chat.jsonl", conversations(11, 0))
    with contextlib.redirect_stdout(io.StringIO()):
        val_loss = sft.main(["--pretrained", str(chat_folder), "--data", str(data), "--output", str(root / "run"),
                             *FLAGS, *levers])
    return root / "run", val_loss


@pytest.mark.integration
@pytest.mark.parametrize("levers, quantized", [((), False), (("--quantize", "int8"), True)], ids=["lora", "qlora-int8"])
def test_an_sft_lora_run_reloads_with_its_adapters_template_and_val_loss(chat_folder, tmp_path, levers, quantized):
    run, val_loss = train(chat_folder, tmp_path, *levers)
    tuned = zoo.load(run / "model.keras")
    config = tuned.get_config()
    assert config["lora"]["rank"] == 2
    assert bool(config.get("quantization")) == quantized
    assert tuned.trainable_weights and all("lora_kernel" in w.path for w in tuned.trainable_weights)
    assert tuned.tokenizer.chat_template == CHATML
    ((name, value),) = sft.evaluate(run).items()  # the reloaded model scores what the run printed
    assert name == "val_loss" and value == pytest.approx(val_loss, rel=1e-5)


@pytest.mark.integration
def test_an_sft_lora_run_exports_its_template_and_merged_weights_with_the_run_logits(chat_folder, tmp_path):
    run, _ = train(chat_folder, tmp_path)
    assert cli.main(["export", str(run), str(tmp_path / "merged"), "--format", "huggingface"]) == 0
    settings = json.loads((tmp_path / "merged" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert settings["chat_template"] == CHATML
    exported = zoo.from_pretrained(tmp_path / "merged", task="causal_lm")
    assert exported.tokenizer.chat_template == CHATML
    tuned, original = zoo.load(run / "model.keras"), zoo.from_pretrained(chat_folder, task="causal_lm")
    run_logits = np.asarray(tuned.predict(INPUTS, verbose=0))
    np.testing.assert_allclose(np.asarray(exported.predict(INPUTS, verbose=0)), run_logits, rtol=1e-5, atol=1e-5)
    assert np.abs(np.asarray(original.predict(INPUTS, verbose=0)) - run_logits).max() > 1e-4  # the adapters trained
