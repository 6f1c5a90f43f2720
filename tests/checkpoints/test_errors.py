"""A wrong checkpoint folder gives one CheckpointError naming the file, before anything loads."""

import json
import re
import shutil

import pytest
from safetensors.numpy import load_file, save_file

import zoo
from zoo.checkpoints import CheckpointError


@pytest.fixture(scope="module")
def pristine(checkpoint_folders):
    return {
        "gpt2": checkpoint_folders["hf_gpt2"],
        "bert": checkpoint_folders["hf_bert_cls"],
        "kh_gpt2": checkpoint_folders["kh_gpt2"][0],
    }


@pytest.fixture
def copy(pristine, tmp_path):
    def make(name):
        return shutil.copytree(pristine[name], tmp_path / name)

    return make


def raises_naming(path, match=""):
    return pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*" + match)


def edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("missing", ["vocab.json", "merges.txt", "model.safetensors", "config.json"])
def test_a_missing_hugging_face_file_is_named(copy, missing):
    folder = copy("gpt2")
    (folder / missing).unlink()
    with raises_naming(folder / missing, "does not exist"):
        zoo.from_pretrained(folder)


@pytest.mark.parametrize("missing", ["tokenizer.json", "model.weights.h5", "assets/tokenizer/merges.txt"])
def test_a_missing_keras_hub_file_is_named(copy, missing):
    folder = copy("kh_gpt2")
    (folder / missing).unlink()
    with raises_naming(folder / missing, "does not exist"):
        zoo.from_pretrained(folder)


def test_another_architecture_is_refused(copy):
    folder = copy("gpt2")
    edit_json(folder / "config.json", model_type="whisper", architectures=["WhisperForConditionalGeneration"])
    with raises_naming(folder / "config.json", "model_type 'whisper' is not supported; expected .*'gpt2'.*'llama'.*'gemma3_text'"):
        zoo.from_pretrained(folder)
    folder = copy("bert")
    edit_json(folder / "config.json", architectures=["BertForTokenClassification"])
    with raises_naming(folder / "config.json", "BertForTokenClassification"):
        zoo.from_pretrained(folder)


def test_another_keras_hub_backbone_is_refused(copy):
    folder = copy("kh_gpt2")
    edit_json(folder / "config.json", registered_name="keras_hub>GemmaBackbone")
    with raises_naming(folder / "config.json", "GemmaBackbone; expected one of .*keras_hub>GPT2Backbone"):
        zoo.from_pretrained(folder)


def test_a_tokenizer_larger_than_the_embedding_is_refused(copy):
    folder = copy("gpt2")
    vocabulary = json.loads((folder / "vocab.json").read_text())
    vocabulary["Ġextra"] = len(vocabulary)
    (folder / "vocab.json").write_text(json.dumps(vocabulary))
    with raises_naming(folder / "vocab.json", f"{len(vocabulary)} tokens but the embedding table"):
        zoo.from_pretrained(folder)
    folder = copy("bert")
    with open(folder / "vocab.txt", "a") as f:
        f.write("extra\n")
    with raises_naming(folder / "vocab.txt", "tokens but the embedding table"):
        zoo.from_pretrained(folder)


def test_weights_that_do_not_fit_the_config_are_refused(copy):
    folder = copy("gpt2")
    edit_json(folder / "config.json", n_positions=64)
    with raises_naming(folder / "model.safetensors", r"'transformer.wpe.weight' has shape \(32, 16\); expected \(64, 16\)"):
        zoo.from_pretrained(folder)


def test_a_missing_or_foreign_tensor_is_refused(copy):
    folder = copy("bert")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["bert.encoder.layer.1.output.dense.bias"]
    save_file(tensors, str(folder / "model.safetensors"))
    with raises_naming(folder / "model.safetensors", "1 tensor.* missing.*encoder.layer.1.output.dense.bias"):
        zoo.from_pretrained(folder)
    folder = copy("gpt2")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["transformer.h.2.ln_1.weight"] = tensors["transformer.h.1.ln_1.weight"]  # a third block
    save_file(tensors, str(folder / "model.safetensors"))
    with raises_naming(folder / "model.safetensors", "does not have.*h.2.ln_1.weight"):
        zoo.from_pretrained(folder)


@pytest.mark.parametrize("keep", [0.5, 0.001])  # the tensors cut short; the header cut short
def test_a_truncated_safetensors_file_is_named(copy, keep):
    folder = copy("gpt2")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: max(8, int(len(data) * keep))])
    with raises_naming(folder / "model.safetensors", "truncated or corrupted"):
        zoo.from_pretrained(folder)


def test_a_truncated_keras_hub_weights_file_is_named(copy):
    folder = copy("kh_gpt2")
    data = (folder / "model.weights.h5").read_bytes()
    (folder / "model.weights.h5").write_bytes(data[: len(data) // 2])
    with raises_naming(folder / "model.weights.h5", "truncated or corrupted"):
        zoo.from_pretrained(folder)


def test_an_untied_lm_head_is_refused(copy):
    folder = copy("gpt2")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"] + 1.0
    save_file(tensors, str(folder / "model.safetensors"))
    with raises_naming(folder / "model.safetensors", "'lm_head.weight' differs"):
        zoo.from_pretrained(folder)


def test_a_task_of_the_other_family_is_refused(pristine):
    with pytest.raises(ValueError, match="task='classifier' does not fit .*GPT-2 checkpoint; expected one of 'causal_lm'"):
        zoo.from_pretrained(pristine["gpt2"], task="classifier")


def test_not_a_checkpoint_folder(tmp_path):
    with raises_naming(tmp_path / "nowhere", "not a folder"):
        zoo.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text(json.dumps({"hidden": 3}))
    with raises_naming(tmp_path / "config.json", "neither a keras-hub preset config"):
        zoo.from_pretrained(tmp_path)
