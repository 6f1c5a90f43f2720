"""`zoo serve --draft MODEL` (and `--prompt-lookup N`): each request decoded
alone by speculative decoding, the greedy answers `zoo.generate`'s without
speculation, streamed or not; a seeded answer is the same every time; a
draft of another vocabulary is refused before the server starts."""

import httpx
import pytest

import zoo
from tests.serve.conftest import TEXT, Server, char_lm
from zoo.tokenizers import CharTokenizer

pytest.importorskip("starlette")

PROMPT = "ROMEO: "


@pytest.fixture(scope="module")
def served():
    lm = char_lm()
    draft = zoo.build("gpt-nano", "causal_lm", vocabulary_size=lm.vocabulary_size, max_sequence_length=32,
                      num_layers=1, tokenizer=lm.tokenizer)
    server = Server(lm, speculation=dict(assistant_model=draft, num_assistant_tokens=3))
    yield lm, server
    server.stop()


def complete(server, **fields):
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 12, **fields}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response


def test_greedy_answers_are_those_without_speculation_streamed_or_not(served):
    lm, server = served
    alone = zoo.generate(lm, PROMPT, max_new_tokens=12)[len(PROMPT):]
    assert complete(server, temperature=0).json()["choices"][0]["text"] == alone
    streamed = complete(server, temperature=0, stream=True).text
    pieces = [line for line in streamed.splitlines() if line.startswith("data: {")]
    import json

    assert "".join(json.loads(line[6:])["choices"][0]["text"] for line in pieces) == alone


def test_a_seeded_answer_is_the_same_every_time(served):
    _, server = served
    first = complete(server, temperature=0.9, seed=5).json()["choices"][0]["text"]
    assert complete(server, temperature=0.9, seed=5).json()["choices"][0]["text"] == first


def test_a_draft_of_another_vocabulary_is_refused_before_serving(tmp_path):
    from zoo.serve import _speculation

    lm = char_lm()
    other = CharTokenizer.from_text(TEXT + "xyz")
    draft = zoo.build("gpt-nano", "causal_lm", vocabulary_size=other.vocabulary_size(), max_sequence_length=32,
                      tokenizer=other)
    zoo.save(draft, tmp_path / "draft.keras")
    with pytest.raises(ValueError, match="vocabulary has .* tokens, the model's"):
        _speculation(lm, str(tmp_path / "draft.keras"), None, None)
    with pytest.raises(ValueError, match="expected one proposer"):
        _speculation(lm, str(tmp_path / "draft.keras"), None, 4)
