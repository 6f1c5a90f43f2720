"""Checkpoints by handle: `zoo.from_pretrained("hf://ORG/NAME")` against a
Hugging Face Hub endpoint on 127.0.0.1 (tests/checkpoints/hub_server.py),
with an empty Hugging Face cache per test. A handle loads the same model
as its local folder, from the cache when offline, at a pinned revision;
what cannot be fetched is refused in one line naming the handle; and the
`zoo` commands and recipes that take a checkpoint take a handle."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zoo
from recipes import bert_classify, cli, gpt_finetune
from zoo.explore import explorer as engine
from tests.checkpoints import stand_ins as ck
from tests.checkpoints import llama_checkpoints as lc
from tests.checkpoints import t5_checkpoints as tc
from tests.checkpoints.hub_server import HubServer, point_huggingface_hub
from zoo.checkpoints import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_test_token_of_an_account_with_access"
SAMPLE = ["hello", "--max-length", "8", "--seed", "1"]


def _np(x):
    import keras

    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module")
def folders(checkpoint_folders, tmp_path_factory):
    """The local folders the hub serves. The GPT-2 repository's main branch
    also holds files a checkpoint does not need (PyTorch and ONNX copies, a
    README), which must not download."""
    root = tmp_path_factory.mktemp("hub_repositories")
    gpt2 = shutil.copytree(checkpoint_folders["hf_gpt2"], root / "gpt2")
    (gpt2 / "pytorch_model.bin").write_bytes(b"not read: the weights are in model.safetensors")
    (gpt2 / "onnx").mkdir()
    (gpt2 / "onnx" / "model.safetensors").write_bytes(b"not a checkpoint file")
    (gpt2 / "README.md").write_text("A tiny random GPT-2.\n")
    return {
        "gpt2": gpt2,
        "gpt2_v1": checkpoint_folders["hf_gpt2_bare"],  # other weights, the `gpt2` repository's tensor names
        "llama": lc.hf_folder(root / "llama", "llama"),
        "keras_hub": checkpoint_folders["kh_gpt2"][0],
        "bert_classifier": checkpoint_folders["hf_bert_cls"],
        "t5": _t5_folder(root / "t5"),
    }


def _t5_folder(folder):
    """flan-t5-small's files: spiece.model and T5TokenizerFast's tokenizer.json of it."""
    tc.hf_folder(folder, version="v1.1")
    (folder / "tokenizer.json").write_text(tc.tokenizer_json((folder / "spiece.model").read_bytes()), encoding="utf-8")
    return folder


@pytest.fixture
def hub(folders, tmp_path, monkeypatch):
    """The hub on 127.0.0.1 with the test repositories, huggingface_hub pointed at it, an empty cache."""
    server = HubServer()
    server.commit("org/tiny-gpt2", folders["gpt2_v1"], tags=("v1",))
    server.commit("org/tiny-gpt2", folders["gpt2"])  # main moves on
    server.commit("org/tiny-llama", folders["llama"])
    server.commit("keras-test/tiny-gpt2", folders["keras_hub"])
    server.commit("org/tiny-bert-classifier", folders["bert_classifier"])
    server.commit("org/tiny-t5", folders["t5"])
    server.commit("org/gated", folders["gpt2"], token=TOKEN)
    point_huggingface_hub(monkeypatch, server.endpoint, tmp_path / "hf_home")
    with server:
        yield server


def assert_same_model(model, expected):
    """The same class, logits and token ids."""
    assert type(model) is type(expected)
    ids = np.random.default_rng(0).integers(0, expected.backbone.vocabulary_size, (2, 12)).astype("int32")
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    np.testing.assert_array_equal(_np(model(x)), _np(expected(x)))
    for sentence in ck.SENTENCES:
        assert _np(model.tokenizer(sentence)).tolist() == _np(expected.tokenizer(sentence)).tolist()


def assert_one_line(error, handle, *words):
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{handle}: "), message
    for word in words:
        assert word in message, message


# --- Loading by handle ---------------------------------------------------------------


@pytest.mark.parametrize("handle, name", [("hf://org/tiny-gpt2", "gpt2"), ("hf://org/tiny-llama", "llama")])
def test_a_handle_loads_the_model_its_local_folder_loads(hub, folders, tmp_path, handle, name):
    model = zoo.from_pretrained(handle)
    assert_same_model(model, zoo.from_pretrained(folders[name]))
    folder = zoo.checkpoints.checkpoint_folder(handle)  # now from the cache, the same snapshot
    assert folder.is_relative_to(tmp_path / "hf_home" / "hub")
    assert folder.name == hub.repositories[handle[5:]].refs["main"] and folder.parent.name == "snapshots"


def test_only_the_files_a_checkpoint_needs_download(hub):
    folder = zoo.checkpoints.checkpoint_folder("hf://org/tiny-gpt2")
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]


def test_a_t5_handle_reads_its_sentencepiece_model(hub, folders):
    model = zoo.from_pretrained("hf://org/tiny-t5")
    folder = zoo.checkpoints.checkpoint_folder("hf://org/tiny-t5")
    assert (folder / "spiece.model").is_file()
    assert type(model.tokenizer).__name__ == "T5Tokenizer"
    expected = zoo.from_pretrained(folders["t5"])
    for sentence in tc.SENTENCES:
        assert _np(model.tokenizer(sentence)).tolist() == _np(expected.tokenizer(sentence)).tolist()
    assert zoo.translate(model, tc.SENTENCES[:2], max_length=6) == zoo.translate(expected, tc.SENTENCES[:2], max_length=6)


def test_a_keras_hub_preset_on_the_hub_loads_through_the_keras_hub_driver(hub, folders):
    folder = zoo.checkpoints.checkpoint_folder("hf://keras-test/tiny-gpt2")
    assert zoo.checkpoints.checkpoint_format(folder) == "keras-hub"
    assert (folder / "assets" / "tokenizer" / "vocabulary.json").is_file()
    assert_same_model(zoo.from_pretrained("hf://keras-test/tiny-gpt2"), zoo.from_pretrained(folders["keras_hub"]))


def test_offline_the_handle_loads_from_the_cache(hub, folders, tmp_path, monkeypatch):
    zoo.from_pretrained("hf://org/tiny-gpt2")
    hub.stop()
    point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home", offline=True)
    assert_same_model(zoo.from_pretrained("hf://org/tiny-gpt2"), zoo.from_pretrained(folders["gpt2"]))
    for handle in ("hf://org/tiny-gpt2@v1", "hf://org/tiny-llama"):  # never downloaded
        with pytest.raises(CheckpointError) as error:
            zoo.from_pretrained(handle)
        assert_one_line(error, handle, "HF_HUB_OFFLINE is set", str(tmp_path / "hf_home" / "hub"))


def test_offline_makes_no_request_even_with_the_hub_up(hub, tmp_path, monkeypatch):
    online = zoo.checkpoints.checkpoint_folder("hf://org/tiny-gpt2")
    served = len(hub.requests)
    point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home", offline=True)
    assert zoo.checkpoints.checkpoint_folder("hf://org/tiny-gpt2") == online
    assert len(hub.requests) == served


def test_a_pinned_revision_loads_the_older_weights(hub, folders):
    older, main = zoo.from_pretrained(folders["gpt2_v1"]), zoo.from_pretrained("hf://org/tiny-gpt2")
    x = {"token_ids": np.array([[1, 2, 3, 4]], "int32"), "padding_mask": np.ones((1, 4), "int32")}
    assert not np.allclose(_np(older(x)), _np(main(x)))
    commit = hub.repositories["org/tiny-gpt2"].refs["v1"]
    for handle, revision in (("hf://org/tiny-gpt2", "v1"), ("hf://org/tiny-gpt2@v1", None),
                             ("hf://org/tiny-gpt2", commit), (f"hf://org/tiny-gpt2@{commit}", None)):
        assert_same_model(zoo.from_pretrained(handle, revision=revision), older)
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained("hf://org/tiny-gpt2@v1", revision="main")
    assert_one_line(error, "hf://org/tiny-gpt2@v1", "pins revision 'v1' but revision='main'")


# --- Refusals ------------------------------------------------------------------------


@pytest.mark.parametrize("handle, revision, words", [
    ("hf://org/missing", None, ["no repository org/missing", "HF_TOKEN"]),
    ("hf://org/gated", None, ["org/gated", "gated", "set HF_TOKEN"]),
    ("hf://org/tiny-gpt2@no-such-tag", None, ["no revision 'no-such-tag'", "a branch, tag or commit"]),
    ("hf://org/tiny-gpt2", "no-such-branch", ["no revision 'no-such-branch'"]),
])
def test_what_the_hub_refuses_is_one_line_naming_the_handle(hub, handle, revision, words):
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained(handle, revision=revision)
    assert_one_line(error, handle, hub.endpoint, *words)


def test_a_gated_repository_loads_with_hf_token(hub, folders, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert_same_model(zoo.from_pretrained("hf://org/gated"), zoo.from_pretrained(folders["gpt2"]))
    assert any(path.startswith("/org/gated/resolve/") for _, path in hub.requests)


@pytest.mark.parametrize("handle", ["hf://", "hf://org", "hf://org/", "hf:///name", "hf://org/name/extra",
                                    "hf://org/name@", "hf://org name/x", "hf://../name"])
def test_a_malformed_handle_is_refused_before_any_request(hub, handle):
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained(handle)
    assert_one_line(error, handle, "not a Hugging Face handle", "hf://ORG/NAME")
    assert hub.requests == []


def test_an_unreachable_endpoint_is_named_with_hf_endpoint(hub):
    hub.stop()
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained("hf://org/tiny-gpt2")
    assert_one_line(error, "hf://org/tiny-gpt2", f"cannot reach the Hugging Face Hub at {hub.endpoint} (HF_ENDPOINT)")


def test_a_revision_for_a_local_folder_is_refused(folders):
    with pytest.raises(CheckpointError, match="revision='v1' applies to hf:// handles only"):
        zoo.from_pretrained(str(folders["gpt2"]), revision="v1")


def test_keras_hub_preset_names_go_to_keras_hub_and_a_local_folder_wins(folders, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert zoo.checkpoints.is_handle("gpt2_base_en")
    assert zoo.checkpoints.is_handle("kaggle://keras/gpt2/keras/gpt2_base_en")
    assert not zoo.checkpoints.is_handle("no_such_preset_name")
    shutil.copytree(folders["keras_hub"], tmp_path / "gpt2_base_en")
    assert not zoo.checkpoints.is_handle("gpt2_base_en")
    assert_same_model(zoo.from_pretrained("gpt2_base_en"), zoo.from_pretrained(folders["keras_hub"]))


@pytest.mark.parametrize("handle", ["kaggle://keras/gpt2/keras/gpt2_base_en/3", "gpt2_base_en"])
def test_a_keras_hub_handle_kaggle_does_not_answer_is_one_line(handle, tmp_path, monkeypatch):
    # Kaggle's client pointed at its local test endpoint (nothing listens there) and an empty cache:
    # the refusal of a machine without network, whether or not this one has it.
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "TEST")
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained(handle)
    assert_one_line(error, handle, "keras-hub could not fetch the preset")


# --- The commands and recipes that take a checkpoint ----------------------------------


def test_zoo_sample_continues_with_a_handle_as_generate_does(hub, folders, capsys):
    assert cli.main(["sample", "hf://org/tiny-gpt2", *SAMPLE]) == 0
    out = capsys.readouterr().out
    local = zoo.from_pretrained(folders["gpt2"])
    expected = zoo.generate(local, "hello", max_length=8, temperature=0.8, seed=1, sampler="temperature")
    assert out == expected + "\n" and len(expected) > len("hello")


def test_zoo_sample_and_classify_take_checkpoint_folders_of_their_kind(folders, capsys):
    sentences = ["a gripping film", "a dull plot"]
    assert cli.main(["classify", str(folders["bert_classifier"]), *sentences]) == 0
    result = zoo.classify(zoo.from_pretrained(folders["bert_classifier"]), sentences)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(label) for label in result.labels]
    assert cli.main(["sample", str(folders["bert_classifier"]), "hi"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"zoo sample: error: {folders['bert_classifier']}: a BertClassifier checkpoint; "
                     "`zoo sample` needs a causal LM (GPT-2, the Llama family or Gemma 3) or an encoder-decoder "
                     "(Marian, BART, T5 / Flan-T5)"]
    assert cli.main(["classify", str(folders["gpt2"]), "hi"]) == 2
    assert "a GPTCausalLM checkpoint; `zoo classify` needs a BERT classifier" in capsys.readouterr().err


def test_zoo_refusals_of_a_handle_are_one_line_and_status_2(hub, folders, capsys):
    assert cli.main(["sample", "hf://org/missing", "x"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("zoo sample: error: hf://org/missing: no repository org/missing")
    for command in (["eval", "hf://org/tiny-gpt2"], ["eval", str(folders["gpt2"])]):
        assert cli.main(command) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and f"{command[1]}: a checkpoint, not a run folder; `zoo {command[0]}` needs a run " \
            "folder" in error[0], command
    assert ("GET", "/api/models/org/missing/revision/main") in hub.requests
    assert not any("tiny-gpt2" in path for _, path in hub.requests)  # eval fetches nothing
    assert cli.main(["translate", "hf://org/tiny-gpt2", "hallo"]) == 2
    error = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("Fetching ")]
    assert len(error) == 1 and "hf://org/tiny-gpt2: a GPTCausalLM checkpoint; `zoo translate` needs an " \
        "encoder-decoder" in error[0], error


def test_zoo_explore_opens_a_handle(hub, folders):
    assert_same_model(engine.open_target("hf://org/tiny-gpt2"), zoo.from_pretrained(folders["gpt2"]))


def test_the_recipes_take_a_handle_as_pretrained(hub, folders, tmp_path, capsys):
    backbone, tokenizer, where = bert_classify.pretrained_parts("hf://org/tiny-bert-classifier", 3)
    local = zoo.from_pretrained(folders["bert_classifier"], task="classifier", num_classes=3)
    for a, b in zip(backbone.get_weights(), local.backbone.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert where == "the checkpoint hf://org/tiny-bert-classifier" and tokenizer("a film").tolist() == \
        local.tokenizer("a film").tolist()
    # gpt_finetune loads the handle, then finds --sequence-length longer than its 32 positions.
    (tmp_path / "text.txt").write_text("the cat sat on the mat\n" * 50, encoding="utf-8")
    with pytest.raises(SystemExit):
        gpt_finetune.main(["--pretrained", "hf://org/tiny-gpt2", "--data", str(tmp_path / "text.txt"),
                           "--output", str(tmp_path / "run"), "--sequence-length", "64"])
    assert "--sequence-length 64: the checkpoint's context is 32 tokens" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    command = ["train", "gpt_finetune", "--pretrained", "hf://org/missing", "--output", str(tmp_path / "run")]
    assert cli.main(command) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "zoo train gpt_finetune: error: hf://org/missing: no repository")


def test_a_new_process_reads_hf_endpoint_and_hf_home_from_the_environment(hub, tmp_path):
    """As a user's script runs: huggingface_hub reads HF_ENDPOINT and HF_HOME once, at import."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    assert environment["HF_ENDPOINT"] == hub.endpoint and environment["HF_HOME"] == str(tmp_path / "hf_home")
    script = "import zoo; print(zoo.checkpoints.checkpoint_folder('hf://org/tiny-gpt2'))"
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder == tmp_path / "hf_home" / "hub" / "models--org--tiny-gpt2" / "snapshots" / \
        hub.repositories["org/tiny-gpt2"].refs["main"]
    assert (folder / "model.safetensors").is_file()
    assert ("GET", "/org/tiny-gpt2/resolve/" + folder.name + "/model.safetensors") in hub.requests
