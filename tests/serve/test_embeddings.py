"""`zoo serve` of a BERT sentence encoder answers POST /v1/embeddings in
OpenAI's shape with `zoo.embed`'s vectors (floats, or base64 as the
`openai` client asks by default); the encoder answers nothing else, and a
language model no embeddings."""

import base64

import httpx
import numpy as np
import pytest

import zoo
from tests.serve.conftest import Server

pytest.importorskip("openai")
pytest.importorskip("starlette")

SENTENCES = ["a dog runs in the park", "a dog is running", "the stock market fell"]


@pytest.fixture(scope="module")
def encoder():
    from zoo.tokenizers import train_word_piece

    tokenizer = train_word_piece(SENTENCES * 4, vocabulary_size=60)
    return zoo.build("bert-tiny", "sentence_encoder", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)


@pytest.fixture(scope="module")
def embedding_server(encoder):
    server = Server(encoder, name="encoder")
    yield server
    server.stop()


def test_the_openai_client_gets_zoo_embeds_vectors(embedding_server, encoder):
    answer = embedding_server.client().embeddings.create(model="encoder", input=SENTENCES)  # base64 on the wire
    assert [d.index for d in answer.data] == [0, 1, 2] and answer.model == "encoder"
    np.testing.assert_allclose([d.embedding for d in answer.data], zoo.embed(encoder, SENTENCES), rtol=1e-5,
                               atol=1e-6)
    tokens = sum(len(encoder.tokenizer(s)) + 2 for s in SENTENCES)  # [CLS] sentence [SEP]
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens


def test_floats_and_base64_are_the_same_vectors(embedding_server, encoder):
    url = embedding_server.url + "/v1/embeddings"
    floats = httpx.post(url, json={"input": SENTENCES[0], "encoding_format": "float"}, timeout=60).json()
    packed = httpx.post(url, json={"input": SENTENCES[0], "encoding_format": "base64"}, timeout=60).json()
    vector = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4")
    np.testing.assert_array_equal(vector, np.asarray(floats["data"][0]["embedding"], "float32"))
    assert floats["object"] == "list" and floats["data"][0]["object"] == "embedding"


@pytest.mark.parametrize("body, param", [
    ({"input": []}, "input"),
    ({"input": [""]}, "input"),
    ({"input": [1, 2]}, "input"),
    ({"input": ["a"] * 257}, "input"),
    ({"input": "a dog", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a dog", "dimensions": 8}, "dimensions"),
])
def test_bad_embedding_requests_are_refused_in_one_line(embedding_server, body, param):
    response = httpx.post(embedding_server.url + "/v1/embeddings", json=body, timeout=60)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param and "\n" not in error["message"]


def test_an_encoder_answers_no_completions_and_a_language_model_no_embeddings(embedding_server, served):
    refused = httpx.post(embedding_server.url + "/v1/completions", json={"prompt": "a dog"}, timeout=60)
    assert refused.status_code == 400 and "sentence encoder" in refused.json()["error"]["message"]
    refused = httpx.post(served.url + "/v1/embeddings", json={"input": "ROMEO"}, timeout=60)
    assert refused.status_code == 400 and "needs a sentence encoder" in refused.json()["error"]["message"]


def test_zoo_serve_takes_a_sentence_encoder(encoder, tmp_path):
    from zoo.serve import check_language_model

    zoo.save(encoder, tmp_path / "encoder.keras")
    check_language_model(zoo.load(tmp_path / "encoder.keras"), "encoder.keras")  # no refusal
