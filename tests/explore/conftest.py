"""Tiny untrained models of the three kinds `zoo explore` shows, as
tests/test_readme.py lays out runs: gpt-nano with a CharTokenizer,
a bert-tiny classifier on WordPiece and a transformer-tiny translator on
the translate recipe's cased subword tokenizer, from one seed, so that each
run shows the same pages (an untrained translator's answer, its number of
target tokens included, depends on its weights)."""

import string

import pytest

SENTENCES = ["a gripping film", "a dull plot", "the acting is superb", "two dogs run in the snow"]
# The language model's stand-in run.json, as a recipe writes it.
RUN = {"recipe": "gpt_char", "preset": "gpt-nano", "finished": True, "results": {"val_loss": 1.9105, "note": "text"}}


@pytest.fixture(scope="session")
def models():
    import keras

    import zoo
    from zoo.tokenizers import CharTokenizer, train_sentence_piece, train_word_piece

    chars = CharTokenizer.from_text(string.ascii_letters + " \n!$&',-.3:;?")
    word_piece = train_word_piece(SENTENCES * 8, vocabulary_size=120)
    size = word_piece.vocabulary_size()
    pieces = train_sentence_piece([s.capitalize() + "." for s in SENTENCES] * 8, vocabulary_size=60)
    keras.utils.set_random_seed(0)
    return {
        "language_model": zoo.build(
            "gpt-nano", task="causal_lm", vocabulary_size=chars.vocabulary_size(), tokenizer=chars
        ),
        "classifier": zoo.build(
            "bert-tiny", task="classifier", num_classes=2, vocabulary_size=size, tokenizer=word_piece
        ),
        "translator": zoo.build("transformer-tiny", vocabulary_size=pieces.vocabulary_size(), tokenizer=pieces),
    }


@pytest.fixture(scope="session")
def explorers(models):
    from zoo.explore.explorer import Explorer

    return {
        "language_model": Explorer(models["language_model"], "runs/gpt_char", run=RUN),
        "classifier": Explorer(models["classifier"], "runs/bert_classify", labels=["negative", "positive"]),
        "translator": Explorer(models["translator"], "runs/translate"),
    }


@pytest.fixture(scope="session")
def clients(explorers):
    from starlette.testclient import TestClient

    from zoo.explore.app import create_app

    return {kind: TestClient(create_app(explorer)) for kind, explorer in explorers.items()}
