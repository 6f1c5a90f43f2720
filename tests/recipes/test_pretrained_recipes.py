"""The recipes start from real checkpoints: `gpt_finetune --pretrained` on a
Hugging Face GPT-2 folder and `bert_classify --pretrained` on a keras-hub
BERT preset, each a few steps on tiny random checkpoints built here."""

import json

import numpy as np
import pytest

import zoo
from recipes import bert_classify, gpt_finetune
from tests.checkpoints import stand_ins as ck
from tests.recipes.same_seed import assert_equal_weights, run_printing
from tests.recipes.test_bert import sentiment_rows, write_tsv

TEXT = "".join(f"{s}\n\n" for s in ck.SENTENCES) * 25  # about 3,500 byte-level tokens
FINETUNE = ["--steps", "4", "--batch-size", "2", "--sequence-length", "16", "--steps-per-epoch", "2",
            "--eval-batches", "2", "--sample-length", "4", "--jit-compile", "false"]


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt_finetune")
    checkpoint = ck.hf_gpt2_folder(root / "gpt2")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    output = root / "run"
    val_loss = gpt_finetune.main(["--pretrained", str(checkpoint), "--data", str(root / "text.txt"),
                                  "--output", str(output), "--prompt", "the cat", *FINETUNE])
    return checkpoint, output, val_loss


@pytest.mark.integration
def test_gpt_finetune_again_trains_the_same_weights(finetuned, tmp_path):
    checkpoint, output, _ = finetuned
    run_printing(gpt_finetune.main, ["--pretrained", str(checkpoint), "--data", str(output.parent / "text.txt"),
                                     "--output", str(tmp_path / "again"), "--prompt", "the cat", *FINETUNE])
    assert_equal_weights(output, tmp_path / "again")


@pytest.mark.integration
def test_gpt_finetune_trains_the_checkpoint_and_prints_val_loss_last(finetuned, capsys):
    checkpoint, output, val_loss = finetuned
    for name in ("model.keras", "history.csv", "curves.png", "logs", "samples.txt", "run.json"):
        assert (output / name).exists(), name
    run = json.loads((output / "run.json").read_text())
    assert run["finished"] and run["recipe"] == "gpt_finetune" and run["results"]["val_loss"] == val_loss
    assert np.isfinite(val_loss) and np.isfinite(run["results"]["val_loss_before"])
    # The saved model is the checkpoint's architecture and tokenizer, with fine-tuned weights.
    original, tuned = zoo.from_pretrained(checkpoint), zoo.load(output / "model.keras")
    assert tuned.backbone.get_config() == {**original.backbone.get_config(), "name": tuned.backbone.name}
    for sentence in ck.SENTENCES:
        assert np.asarray(tuned.tokenizer(sentence)).tolist() == np.asarray(original.tokenizer(sentence)).tolist()
    moved = [not np.array_equal(a, b) for a, b in zip(original.get_weights(), tuned.get_weights())]
    assert all(moved)
    assert (output / "samples.txt").read_text(encoding="utf-8").startswith("the cat")
    # `zoo eval` computes the figure the recipe printed.
    ((name, value),) = gpt_finetune.evaluate(output).items()
    assert name == "val_loss" and value == pytest.approx(val_loss, rel=1e-6)


@pytest.mark.integration
def test_gpt_finetune_output_exports_as_a_checkpoint_again(finetuned, tmp_path):
    _, output, _ = finetuned
    tuned = zoo.load(output / "model.keras")
    again = zoo.from_pretrained(zoo.export(tuned, tmp_path / "gpt2-shakespeare", format="huggingface"))
    for a, b in zip(tuned.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_gpt_finetune_refuses_before_writing(tmp_path):
    checkpoint = ck.hf_gpt2_folder(tmp_path / "gpt2")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    base = ["--pretrained", str(checkpoint), "--data", str(tmp_path / "text.txt"), "--output", str(tmp_path / "run")]
    with pytest.raises(SystemExit):  # longer than the checkpoint's 32 positions
        gpt_finetune.main([*base, "--sequence-length", "64"])
    with pytest.raises(SystemExit):  # the sizes are the checkpoint's
        gpt_finetune.main([*base, "--num-layers", "4"])
    (tmp_path / "short.txt").write_text("too short", encoding="utf-8")
    from zoo.data import DataError

    with pytest.raises(DataError, match="short.txt: the text is .* tokens, too short"):
        gpt_finetune.main([*base[:2], "--data", str(tmp_path / "short.txt"), *base[4:], "--sequence-length", "16"])
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
def test_bert_classify_fine_tunes_a_keras_hub_preset(tmp_path, capsys, monkeypatch):
    preset = tmp_path / "bert_preset"
    hub = ck.keras_hub_bert_preset(preset, task=None)
    data = tmp_path / "sst2"
    write_tsv(data, "train", sentiment_rows(64, 0))
    write_tsv(data, "dev", sentiment_rows(16, 1))
    handed_over = {}
    original = zoo.models.BertClassifier.__init__

    def spy(self, backbone, **kwargs):  # the backbone as the recipe hands it over, before training (not reloads)
        handed_over.setdefault("backbone", [np.array(w) for w in backbone.weights])
        original(self, backbone, **kwargs)

    monkeypatch.setattr(zoo.models.BertClassifier, "__init__", spy)
    with pytest.warns(UserWarning, match="fresh weights"):  # a backbone preset: the classifier is new
        accuracy = bert_classify.main(["--data", str(data), "--pretrained", str(preset), "--output",
                                       str(tmp_path / "run"), "--sequence-length", "16", "--batch-size", "16",
                                       "--epochs", "1", "--jit-compile", "false"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"val_accuracy={accuracy:.4f}"
    expected = zoo.checkpoints.from_keras_hub(hub).get_weights()
    assert len(handed_over["backbone"]) == len(expected)
    for a, b in zip(handed_over["backbone"], expected):
        np.testing.assert_array_equal(a, b)
    model = zoo.load(tmp_path / "run" / "model.keras")
    assert model.tokenizer.get_vocabulary() == ck.bert_vocabulary()


@pytest.mark.integration
def test_gpt_finetune_with_lora_trains_only_adapters_of_a_llama_family_checkpoint(tmp_path, capsys):
    from tests.checkpoints import llama_checkpoints as lk

    checkpoint = lk.hf_folder(tmp_path / "qwen2", "qwen2")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    output = tmp_path / "run"
    val_loss = gpt_finetune.main(["--pretrained", str(checkpoint), "--data", str(tmp_path / "text.txt"),
                                  "--output", str(output), "--prompt", "the cat", "--lora", "2", *FINETUNE])
    printed = capsys.readouterr().out
    original, tuned = zoo.from_pretrained(checkpoint), zoo.load(output / "model.keras")
    assert isinstance(tuned, zoo.models.LlamaCausalLM) and np.isfinite(val_loss)
    assert f"({original.count_params():,} parameters, " in printed
    # Only the adapters trained. Keras saves a LoRA layer with its adapters merged into the kernel, so
    # each adapted kernel moved by a product of rank at most 2, and every other weight is the checkpoint's.
    tuned_weights = {w.path: np.asarray(w) for w in tuned.weights}
    moved = 0
    for w in original.weights:
        change = tuned_weights[w.path] - np.asarray(w)
        adapted = w.path.endswith("kernel") and w.path.split("/")[-2] in gpt_finetune.LORA_TARGETS
        if adapted:
            moved += bool(np.abs(change).max() > 0)
            assert np.linalg.matrix_rank(change, tol=1e-6) <= 2, w.path
        else:
            np.testing.assert_array_equal(change, 0, err_msg=w.path)
    assert moved == 5 * 2  # q/k/v, the attention's output, gate, up and down projections of both blocks
    # The run folder works with the commands: a sample continues the prompt, eval gives the printed figure.
    assert (output / "samples.txt").read_text(encoding="utf-8").startswith("the cat")
    ((name, value),) = gpt_finetune.evaluate(output).items()
    assert name == "val_loss" and value == pytest.approx(val_loss, rel=1e-6)
