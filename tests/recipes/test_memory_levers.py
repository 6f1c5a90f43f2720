"""The fine-tuning recipes' memory levers as flags: each bad value is one
line and exit status 2 before any model is built; a QLoRA run with every
lever on saves, reloads, samples, serves and exports merged weights."""

import json

import numpy as np
import pytest

import zoo
from recipes import cli, gpt_finetune, lm_data
from tests.checkpoints import stand_ins as ck
from tests.checkpoints.llama_checkpoints import hf_folder

TEXT = "".join(f"{s}\n\n" for s in ck.SENTENCES) * 25
FINETUNE = ["--steps", "4", "--batch-size", "2", "--sequence-length", "16", "--steps-per-epoch", "2",
            "--eval-batches", "2", "--sample-length", "4", "--jit-compile", "false"]


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(zoo, "from_pretrained", refuse)


@pytest.mark.parametrize("recipe", ["gpt_finetune", "sft"])
@pytest.mark.parametrize("flags, expected", [
    (["--lora", "4", "--lora-targets", "query,up"],
     "argument --lora-targets: query,up: unknown projection 'up'; expected comma-separated names from "
     "query,key,value,output,gate,intermediate"),
    (["--lora", "4", "--lora-targets", ","], "argument --lora-targets: ,: no projection"),
    (["--lora", "4", "--quantize", "int3"], "argument --quantize: invalid choice: 'int3'"),
    (["--quantize", "int8"], "--quantize int8: QLoRA trains LoRA adapters on the frozen quantized checkpoint; "
                             "add --lora RANK"),
    (["--lora-targets", "query"], "--lora-targets query: names the projections of LoRA; add --lora RANK"),
    (["--accumulate", "0"], "argument --accumulate: 0: expected a whole number >= 1"),
    (["--remat", "yes"], "unrecognized arguments: yes"),
])
def test_a_bad_memory_lever_is_one_line_and_exit_2_before_any_model(recipe, flags, expected, tmp_path, capsys,
                                                                     no_model):
    data = tmp_path / ("chat.jsonl" if recipe == "sft" else "text.txt")
    data.write_text("x\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit:
        cli.main(["train", recipe, "--pretrained", str(tmp_path / "ckpt"), "--data", str(data),
                  "--output", str(tmp_path / "run"), *flags])
    error = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code == 2 and expected in error[-1], error
    assert not (tmp_path / "run").exists()


def test_the_flags_reach_the_model_and_the_optimizer(tmp_path):
    args = gpt_finetune.parse(["--lora", "2", "--lora-targets", "value,query,value", "--quantize", "int4",
                               "--accumulate", "4", "--remat"])
    assert args.lora_targets == ("value", "query") and args.quantize == "int4"
    assert args.accumulate == 4 and args.remat
    args = gpt_finetune.parse([])
    assert (args.lora_targets, args.quantize, args.accumulate, args.remat) == (None, None, 1, False)


@pytest.mark.integration
def test_a_qlora_run_with_every_lever_saves_reloads_samples_serves_and_exports_merged(tmp_path, capsys):
    pytest.importorskip("openai")
    from tests.serve.conftest import Server

    checkpoint = hf_folder(tmp_path / "qwen2", "qwen2")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    run = tmp_path / "run"
    val_loss = gpt_finetune.main([
        "--pretrained", str(checkpoint), "--data", str(tmp_path / "text.txt"), "--output", str(run),
        "--prompt", "the cat", "--lora", "2", "--lora-targets", "query,value,gate", "--quantize", "int8",
        "--accumulate", "2", "--remat", *FINETUNE,
    ])
    assert np.isfinite(val_loss)
    assert json.loads((run / "run.json").read_text())["args"]["quantize"] == "int8"
    tuned = zoo.load(run / "model.keras")
    assert tuned.get_config()["lora"]["target_names"] == ["query", "value", "gate"]
    assert tuned.get_config()["quantization"] and tuned.backbone.get_config()["quantization"]
    assert {w.path.split("/")[-2] for w in tuned.trainable_weights} == {"query_key_value", "gate"}
    ((name, value),) = gpt_finetune.evaluate(run).items()
    assert name == "val_loss" and value == pytest.approx(val_loss, rel=1e-6)
    capsys.readouterr()
    assert cli.main(["sample", str(run), "the cat", "--max-length", "8", "--seed", "0"]) == 0
    assert capsys.readouterr().out.startswith("the cat")
    server = Server(tuned, name="qlora")
    try:
        answer = server.client().completions.create(model="qlora", prompt="the cat", max_tokens=4, temperature=0)
    finally:
        server.stop()
    assert answer.usage.completion_tokens == 4


@pytest.mark.integration
def test_a_lora_run_exports_merged_weights_with_the_run_logits(tmp_path):
    safetensors = pytest.importorskip("safetensors.numpy")
    checkpoint = hf_folder(tmp_path / "qwen2", "qwen2")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    run = tmp_path / "run"
    gpt_finetune.main(["--pretrained", str(checkpoint), "--data", str(tmp_path / "text.txt"), "--output", str(run),
                       "--lora", "2", "--lora-targets", "key,output", "--learning-rate", "1e-2", *FINETUNE])
    assert cli.main(["export", str(run), str(tmp_path / "merged"), "--format", "huggingface"]) == 0
    assert not [n for n in safetensors.load_file(str(tmp_path / "merged" / "model.safetensors")) if "lora" in n]
    tuned, exported = zoo.load(run / "model.keras"), zoo.from_pretrained(tmp_path / "merged", task="causal_lm")
    original = zoo.from_pretrained(checkpoint, task="causal_lm")
    x = {"token_ids": np.arange(24, dtype="int32").reshape(2, 12) % 50, "padding_mask": np.ones((2, 12), "int32")}
    run_logits = np.asarray(tuned.predict(x, verbose=0))
    np.testing.assert_allclose(np.asarray(exported.predict(x, verbose=0)), run_logits, rtol=1e-5, atol=1e-5)
    assert np.abs(np.asarray(original.predict(x, verbose=0)) - run_logits).max() > 1e-4  # the adapters trained


def test_the_lever_names_are_the_models():
    model = zoo.build("llama-nano", task="causal_lm")
    for name in lm_data.LORA_PROJECTIONS:
        assert list(model._lora_targets((name,))), name
