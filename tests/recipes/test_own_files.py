"""The recipes on a user's own files: bert_classify on a CSV of five-word
tickets in three classes and on a JSONL of sentence pairs, translate on
a TSV of pairs or two aligned files. The label names travel inside the
saved model; `zoo classify` prints them, `zoo eval` prints each class's
precision, recall and F1 beside the accuracy; bad files are one line and
exit status 2 before any model is built."""

import csv
import json
import random

import numpy as np
import pytest

import zoo
from recipes import bert_classify, cli, translate
from tests.recipes.test_bert import CLASSIFY

TEAMS = {"billing": ["invoice", "refund", "charge"], "login": ["password", "locked", "reset"],
         "shipping": ["parcel", "courier", "late"]}
FILLER = ["my", "the", "is", "please", "help", "again", "today"]


def tickets(count, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        team = rng.choice(sorted(TEAMS))
        words = rng.sample(TEAMS[team], 2) + rng.sample(FILLER, 3)
        rng.shuffle(words)
        rows.append({"body": " ".join(words), "team": team})
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def ticket_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tickets")
    train, dev = write_csv(root / "train.csv", tickets(96, 0)), write_csv(root / "dev.csv", tickets(30, 1))
    output = root / "run"
    figure = bert_classify.main(["--data", str(train), "--validation", str(dev), "--text-column", "body",
                                 "--label-column", "team", "--output", str(output), *CLASSIFY])
    return output, dev, figure


def expected_figures(labels, predicted, names):
    """Precision, recall and F1 of each class, by counting."""
    figures = {}
    for c, name in enumerate(names):
        hits = sum(1 for y, p in zip(labels, predicted) if y == p == c)
        said, real = sum(1 for p in predicted if p == c), sum(1 for y in labels if y == c)
        precision, recall = (hits / said if said else 0.0), (hits / real if real else 0.0)
        figures[name] = (precision, recall, 2 * precision * recall / (precision + recall) if hits else 0.0)
    return figures


def test_the_classes_are_the_training_files_labels_and_travel_in_the_saved_model(ticket_run):
    output, dev, figure = ticket_run
    model = zoo.load(output / "model.keras")
    assert model.label_names == ["billing", "login", "shipping"] and model.num_classes == 3
    result = zoo.classify(model, ["my password is locked today"])
    assert result.labels[0] in model.label_names
    assert 0.0 <= figure <= 1.0
    from zoo.explore.explorer import Explorer
    from zoo.explore.protocol import ClassifyRequest

    page = Explorer(model).classify(ClassifyRequest(text="my password is locked today"))
    assert page.labels == model.label_names and page.label == result.labels[0]


def test_zoo_eval_prints_each_classs_precision_recall_and_f1_beside_the_accuracy(ticket_run, capsys):
    output, dev, figure = ticket_run
    assert cli.main(["eval", str(output)]) == 0
    lines = dict(line.split("=") for line in capsys.readouterr().out.strip().splitlines() if "=" in line)
    model = zoo.load(output / "model.keras")
    rows = list(csv.DictReader(open(dev, encoding="utf-8")))
    predicted = [model.label_names.index(label) for label in zoo.classify(model, [r["body"] for r in rows]).labels]
    labels = [model.label_names.index(r["team"]) for r in rows]
    for name, (precision, recall, f1) in expected_figures(labels, predicted, model.label_names).items():
        assert float(lines[f"val_precision/{name}"]) == pytest.approx(precision, abs=5e-5)
        assert float(lines[f"val_recall/{name}"]) == pytest.approx(recall, abs=5e-5)
        assert float(lines[f"val_f1/{name}"]) == pytest.approx(f1, abs=5e-5)
    assert float(lines["val_accuracy"]) == pytest.approx(np.mean(np.array(labels) == predicted), abs=5e-5)
    assert list(lines)[-1] == "val_accuracy" and float(lines["val_accuracy"]) == pytest.approx(figure, abs=5e-5)


def test_zoo_classify_prints_the_saved_names_with_their_probabilities(ticket_run, capsys):
    output, _, _ = ticket_run
    sentences = ["my password is locked today", "where is the parcel please"]
    assert cli.main(["classify", str(output), *sentences, "--all"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = zoo.classify(zoo.load(output / "model.keras"), sentences)
    for line, sentence, label, probabilities in zip(lines, sentences, result.labels, result.probabilities):
        best, shown, text = line.split("\t")
        assert best == label and text == sentence
        assert shown == " ".join(f"{n}={p:.4f}" for n, p in zip(["billing", "login", "shipping"], probabilities))


def test_a_validation_label_outside_the_training_set_is_refused_before_any_model(tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", tickets(40, 0))
    dev = write_csv(tmp_path / "dev.csv", tickets(5, 1) + [{"body": "my order is wrong", "team": "sales"}])
    output = tmp_path / "run"
    assert cli.main(["train", "bert_classify", "--data", str(train), "--validation", str(dev), "--text-column",
                     "body", "--label-column", "team", "--output", str(output), *CLASSIFY]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"zoo train bert_classify: error: {dev}, line 7: label 'sales' is not in the training split's "
                     "label set (billing, login, shipping); expected one of them")
    assert not output.exists()


@pytest.mark.parametrize("flags, message", [
    (["--text-column", "text"], "line 1: the header names no 'text' column"),
    (["--text-column", "body", "--text-pair-column", "other"], "line 1: the header names no 'other' column"),
])
def test_a_missing_column_is_refused_in_one_line(tmp_path, capsys, flags, message):
    train = write_csv(tmp_path / "train.csv", tickets(20, 0))
    assert cli.main(["train", "bert_classify", "--data", str(train), "--label-column", "team",
                     "--output", str(tmp_path / "run"), *flags, *CLASSIFY]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_file_and_one_class_are_refused(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("\n")
    assert cli.main(["train", "bert_classify", "--data", str(tmp_path / "empty.jsonl"),
                     "--output", str(tmp_path / "run"), *CLASSIFY]) == 2
    assert "empty.jsonl: empty; expected rows with the columns text, label" in capsys.readouterr().err
    one = write_csv(tmp_path / "one.csv", [{"text": f"row {i}", "label": "same"} for i in range(10)])
    assert cli.main(["train", "bert_classify", "--data", str(one), "--output", str(tmp_path / "run"), *CLASSIFY]) == 2
    assert "every training row has the label 'same'; expected at least 2 classes" in capsys.readouterr().err


def test_sentence_pairs_train_through_segment_ids_and_classify_as_packed(tmp_path, capsys):
    from zoo.data import pack_sentences
    from zoo.tokenizers import token_id_lists

    rng = random.Random(0)
    rows = []
    for _ in range(60):
        a, b = rng.sample(["a cat sat", "a dog ran", "the sun is hot", "rain falls"], 2)
        same = rng.random() < 0.5
        rows.append({"premise": a, "hypothesis": a if same else b, "label": "same" if same else "different"})
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "run"
    bert_classify.main(["--data", str(tmp_path / "pairs.jsonl"), "--text-column", "premise", "--text-pair-column",
                        "hypothesis", "--validation-fraction", "0.2", "--output", str(output), *CLASSIFY])
    model = zoo.load(output / "model.keras")
    assert model.label_names == ["different", "same"]
    pairs = [("a cat sat", "rain falls"), ("the sun is hot", "the sun is hot")]
    result = zoo.classify(model, pairs)
    tokenizer, vocabulary = model.tokenizer, model.tokenizer.get_vocabulary()
    first, second = (token_id_lists(tokenizer, [p[i] for p in pairs]) for i in (0, 1))
    inputs = pack_sentences(first, second, max(len(a) + len(b) + 3 for a, b in zip(first, second)),
                            vocabulary.index("[CLS]"), vocabulary.index("[SEP]"))
    assert inputs["segment_ids"].any()
    logits = np.asarray(model.predict(inputs, verbose=0), "float64")
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(result.probabilities, expected / expected.sum(-1, keepdims=True), atol=1e-5)
    capsys.readouterr()
    assert cli.main(["classify", str(output), *[a for a, _ in pairs], *sum((["--pair", b] for _, b in pairs), [])]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.strip().splitlines()]
    assert [(row[0], row[2], row[3]) for row in printed] == [(label, a, b) for label, (a, b) in zip(result.labels, pairs)]
    assert cli.main(["classify", str(output), "a cat sat", "--pair", "x", "--pair", "y"]) == 2
    assert "--pair given 2 times for 1 sentences" in capsys.readouterr().err


def test_translate_reads_your_own_pairs_and_holds_out_validation_by_seed(tmp_path):
    pairs = [(f"le chat {i}.", f"the cat {i}.") for i in range(40)]
    (tmp_path / "p.tsv").write_text("fr\ten\n" + "".join(f"{s}\t{t}\n" for s, t in pairs))
    args = {"data": str(tmp_path / "p.tsv"), "source_lang": "fr", "target_lang": "en", "validation": None,
            "validation_fraction": 0.1, "seed": 7}
    train, val = translate.pairs(args, "train"), translate.pairs(args, "val")
    assert len(val[0]) == 4 and len(train[0]) == 36
    assert not set(zip(*train)) & set(zip(*val))
    assert sorted(list(zip(*train)) + list(zip(*val))) == sorted(pairs)
    assert translate.pairs(args, "val") == val
    (tmp_path / "dev.jsonl").write_text(json.dumps({"translation": {"fr": "un chien.", "en": "a dog."}}) + "\n")
    args["validation"] = str(tmp_path / "dev.jsonl")
    assert translate.pairs(args, "val") == (["un chien."], ["a dog."])
    assert translate.pairs(args, "train") == ([s for s, _ in pairs], [t for _, t in pairs])
    assert translate.pairs(args, "test", data=str(tmp_path / "dev.jsonl")) == (["un chien."], ["a dog."])


def test_translate_refuses_a_missing_aligned_file_and_validation_without_own_data(tmp_path, capsys):
    (tmp_path / "c.fr").write_text("un\n")
    for flags, message in (
        (["--data", f"{tmp_path / 'c.fr'},{tmp_path / 'c.en'}"], "c.en is no file; expected a CSV, TSV or JSONL file"),
        (["--validation", str(tmp_path / "c.fr")], "expected --data to be your own pairs"),
    ):
        with pytest.raises(SystemExit) as exit:
            cli.main(["train", "translate", *flags, "--output", str(tmp_path / "run")])
        assert exit.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "run").exists()


@pytest.mark.integration  # a translator trained on your own pairs, then scored on another file of them
def test_translate_trains_on_a_tsv_and_evaluates_on_two_aligned_files(tmp_path, capsys):
    pairs = [(f"le {n} {a}.", f"the {b} {m}.") for (n, m) in (("chat", "cat"), ("chien", "dog"), ("pomme", "apple"))
             for (a, b) in (("rouge", "red"), ("noir", "black"), ("grand", "big"))] * 6
    (tmp_path / "p.tsv").write_text("fr\ten\n" + "".join(f"{s}\t{t}\n" for s, t in pairs))
    (tmp_path / "t.fr").write_text("".join(s + "\n" for s, _ in pairs[:9]))
    (tmp_path / "t.en").write_text("".join(t + "\n" for _, t in pairs[:9]))
    output = tmp_path / "run"
    bleu = translate.main(["--data", str(tmp_path / "p.tsv"), "--source-lang", "fr", "--target-lang", "en",
                           "--preset", "transformer-tiny", "--epochs", "1", "--batch-size", "8",
                           "--vocabulary-size", "40", "--warmup-steps", "2", "--output", str(output)])
    assert "51 training pairs, 3 validation pairs" in capsys.readouterr().out
    assert 0.0 <= bleu <= 100.0
    assert cli.main(["eval", str(output), "--data", f"{tmp_path / 't.fr'},{tmp_path / 't.en'}", "--split",
                     "test"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("test_bleu=")
