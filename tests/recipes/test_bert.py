"""The BERT recipes: masked-LM pretraining, then SST-2 fine-tuning from the
pretrained backbone, on a tiny TSV; their refusals; and (slow) the real runs."""

import json
import random

import numpy as np
import pytest

from recipes import bert_classify, bert_pretrain
from tests.recipes.figures import BERT
from tests.recipes.same_seed import assert_equal_weights, run_printing
from tests.shared_data import needs
from zoo.data import DataError

SIZES = ["--preset", "bert-tiny", "--hidden-dim", "32", "--intermediate-dim", "64", "--sequence-length", "16",
         "--batch-size", "16", "--epochs", "1", "--jit-compile", "false"]
PRETRAIN = [*SIZES, "--vocabulary-size", "100"]
CLASSIFY = [*SIZES, "--vocabulary-size", "100"]
# With --pretrained the sizes are the backbone's (size flags are refused).
FINE_TUNE = ["--sequence-length", "16", "--batch-size", "16", "--epochs", "1", "--jit-compile", "false"]


def sentiment_rows(count, seed):
    rng = random.Random(seed)
    good, bad = ["good", "great", "fun", "moving"], ["bad", "dull", "boring", "flat"]
    filler = ["the", "film", "is", "a", "story", "very", "and", "plot", "acting"]
    rows = []
    for _ in range(count):
        label = rng.randint(0, 1)
        words = rng.choices(filler, k=rng.randint(2, 8)) + [rng.choice(good if label else bad)]
        rng.shuffle(words)
        rows.append(f"{label}\t{' '.join(words)}")
    return rows


def write_tsv(folder, split, rows, header="label\tsentence"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sst2")
    write_tsv(folder, "train", sentiment_rows(160, 0))
    write_tsv(folder, "dev", sentiment_rows(36, 1))
    return folder


@pytest.fixture(scope="module")
def pretrained(sst2, tmp_path_factory):
    output = tmp_path_factory.mktemp("pretrain") / "run"
    val_loss = bert_pretrain.main(["--data", str(sst2), "--output", str(output), *PRETRAIN])
    return output, val_loss


@pytest.mark.integration
def test_pretraining_writes_the_backbone_and_prints_val_loss_last(pretrained, capsys):
    output, val_loss = pretrained
    assert 0.0 < val_loss < 10.0
    for name in ("model.keras", "vocabulary.txt", "history.csv", "curves.png", "run.json"):
        assert (output / name).is_file(), name
    assert json.loads((output / "run.json").read_text())["finished"]
    import zoo

    config = zoo.load(output / "model.keras").backbone.get_config()
    assert config["hidden_dim"] == 32 and config["max_sequence_length"] == 16


@pytest.mark.integration
def test_pretraining_again_trains_the_same_weights(sst2, pretrained, tmp_path):
    run_printing(bert_pretrain.main, ["--data", str(sst2), "--output", str(tmp_path / "again"), *PRETRAIN])
    assert_equal_weights(pretrained[0], tmp_path / "again")


@pytest.mark.integration
def test_fine_tuning_starts_from_the_pretrained_backbone(sst2, pretrained, tmp_path, capsys, monkeypatch):
    import zoo

    folder, _ = pretrained
    reference = zoo.load(folder / "model.keras").backbone
    loaded = {}
    from zoo.models import BertClassifier

    original = BertClassifier.__init__

    def spy(self, backbone, **kwargs):  # the backbone as the recipe hands it over, before training (not reloads)
        if not loaded:
            loaded.update({w.path: np.array(w) for w in backbone.weights})
        original(self, backbone, **kwargs)

    monkeypatch.setattr(BertClassifier, "__init__", spy)
    output = tmp_path / "run"
    accuracy = bert_classify.main(["--data", str(sst2), "--pretrained", str(folder), "--output", str(output),
                                   *FINE_TUNE])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"val_accuracy={accuracy:.4f}"
    assert 0.0 <= accuracy <= 1.0
    for w in reference.weights:
        np.testing.assert_array_equal(loaded[w.path], np.array(w))
    assert (output / "vocabulary.txt").read_text() == (folder / "vocabulary.txt").read_text()


def test_from_scratch_runs_refuses_to_overwrite_and_trains_the_same_weights_again(sst2, tmp_path):
    output = tmp_path / "run"
    accuracy, lines = run_printing(bert_classify.main, ["--data", str(sst2), "--output", str(output), *CLASSIFY])
    assert lines[-1] == f"val_accuracy={accuracy:.4f}"
    before = (output / "model.keras").stat().st_mtime_ns
    with pytest.raises(FileExistsError, match="--overwrite"):
        bert_classify.main(["--data", str(sst2), "--output", str(output), *CLASSIFY])
    assert (output / "model.keras").stat().st_mtime_ns == before
    run_printing(bert_classify.main, ["--data", str(sst2), "--output", str(tmp_path / "again"), *CLASSIFY])
    assert_equal_weights(output, tmp_path / "again")


@pytest.mark.parametrize(
    "row, message",
    [
        ("a row without a label", r"train\.tsv, line 4: expected 'label<TAB>text'"),
        ("positive\ta fine film", r"train\.tsv, line 4: expected an integer label, got 'positive'"),
    ],
)
def test_bad_rows_name_the_file_and_line_and_write_nothing(tmp_path, row, message):
    data = tmp_path / "data"
    write_tsv(data, "train", ["1\tgood", "0\tbad", row, "1\tfun"])
    write_tsv(data, "dev", ["1\tgood"])
    output = tmp_path / "run"
    output.mkdir()
    (output / "keep.txt").write_text("earlier results")
    for recipe, flags in ((bert_classify, CLASSIFY), (bert_pretrain, PRETRAIN)):
        with pytest.raises(DataError, match=message):
            recipe.main(["--data", str(data), "--output", str(output), *flags])
    assert sorted(p.name for p in output.iterdir()) == ["keep.txt"]


def test_missing_and_empty_files_and_a_missing_pretrained_run(sst2, tmp_path):
    data = tmp_path / "data"
    write_tsv(data, "train", ["1\tgood"])
    with pytest.raises(DataError, match=r"dev\.tsv: does not exist"):
        bert_classify.main(["--data", str(data), "--output", str(tmp_path / "run"), *CLASSIFY])
    (data / "dev.tsv").write_text("")
    with pytest.raises(DataError, match=r"dev\.tsv: expected one example a line, got an empty file"):
        bert_classify.main(["--data", str(data), "--output", str(tmp_path / "run"), *CLASSIFY])
    with pytest.raises(DataError, match=r"nowhere: does not exist; expected a bert_pretrain run folder"):
        bert_classify.main(["--data", str(sst2), "--pretrained", str(tmp_path / "nowhere"),
                            "--output", str(tmp_path / "run"), *FINE_TUNE])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@needs("sst2")
def test_sst2_reaches_the_headline_accuracy_and_pretraining_gain(tmp_path):
    """The README's BERT figures: pretraining and fine-tuning for fixed
    epochs (about 45 min of CPU), then the same classifier from scratch;
    the floors are in figures.py."""
    bert_pretrain.main(["--output", str(tmp_path / "pretrain"), *BERT["pretrain_command"]])
    pretrained = bert_classify.main(["--pretrained", str(tmp_path / "pretrain"),
                                     "--output", str(tmp_path / "pretrained"), *BERT["classify_command"]])
    scratch = bert_classify.main(["--output", str(tmp_path / "scratch"), *BERT["classify_command"]])
    figures = f"dev accuracy {pretrained:.4f} pretrained, {scratch:.4f} from scratch; the README reports " \
              f"{BERT['reached']} and a gain of {BERT['gain_reached']}"
    assert pretrained >= BERT["dev_accuracy_at_least"], figures
    assert pretrained - scratch >= BERT["gain_at_least"], figures
