"""`zoo serve` of an encoder-decoder: a completion's prompt is the source,
its text the translation, as `zoo.translate` (greedy) and `zoo.stream`
give it; streamed the same; several prompts decoded side by side in
slots, a request joining a running stream and getting its answer alone;
what it cannot answer refused in one line (echo, logprobs, best_of,
chat)."""


import httpx
import keras
import openai
import pytest

import zoo
from tests.serve.conftest import Server, join_mid_stream
from zoo.tokenizers import WordTokenizer

ENGLISH = ["a dog runs in the park", "two dogs run", "the cat sat on the mat", "a man sleeps"]
GERMAN = ["ein hund läuft im park", "zwei hunde laufen", "die katze sitzt", "ein mann schläft"]


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(1)
    english, german = WordTokenizer.from_texts(ENGLISH), WordTokenizer.from_texts(GERMAN)
    model = zoo.build(
        "transformer-tiny", vocabulary_size=german.vocabulary_size(), source_vocabulary_size=english.vocabulary_size(),
        share_embeddings=False, max_sequence_length=12, tokenizer=german, source_tokenizer=english,
        final_logits_bias=True,
    )
    # Random biases, [END] unlikely: the random model says words, different ones from step to step.
    bias = keras.random.normal((german.vocabulary_size(),), stddev=2.0, seed=1)
    model.output_bias.bias.assign(keras.ops.where(keras.ops.arange(german.vocabulary_size()) == german.end_token_id,
                                                  -20.0, bias))
    return model


@pytest.fixture(scope="module")
def served(translator):
    server = Server(translator, name="translator")
    yield server
    server.stop()


def test_a_completion_is_the_greedy_translation_of_its_prompt(served, translator):
    client = served.client()
    expected = zoo.translate(translator, ENGLISH, num_beams=1)
    answer = client.completions.create(model="translator", prompt=ENGLISH, max_tokens=11, temperature=0)
    assert [choice.text for choice in answer.choices] == expected
    assert any(expected)  # the random model says something
    assert answer.usage.prompt_tokens == sum(len(translator.source_tokenizer(s)) for s in ENGLISH)

    pieces = client.completions.create(model="translator", prompt=ENGLISH[0], max_tokens=11, temperature=0,
                                       stream=True)
    assert "".join(chunk.choices[0].text for chunk in pieces) == expected[0]


@pytest.mark.integration  # a server of its own, and a stream slowed down
def test_a_request_joins_a_running_translation_in_the_slots(translator):
    server = Server(translator, name="translator", max_batch=4)
    slots = server.service.scheduler.slots
    assert slots is not None and slots.encoder_decoder
    try:
        long, answer = join_mid_stream(
            server, {"model": "translator", "prompt": ENGLISH[2], "max_tokens": 11, "temperature": 0},
            {"model": "translator", "prompt": ENGLISH[1], "max_tokens": 6, "temperature": 0.9, "seed": 5})
        assert max(server.service.scheduler.batch_sizes) == 2  # decoded beside the stream
        alone = zoo.stream(translator, ENGLISH[1], max_new_tokens=6, sampler="temperature", temperature=0.9, seed=5)
        assert answer["choices"][0]["text"] == "".join(alone)
        assert long == zoo.translate(translator, [ENGLISH[2]], num_beams=1, max_length=11)[0]
        assert answer["usage"]["prompt_tokens"] == len(translator.source_tokenizer(ENGLISH[1]))
        health = httpx.get(server.url + "/health").json()
        assert health["slots"]["slots"] == 4 and health["slots"]["in_use"] == 0
    finally:
        server.stop()


def test_a_source_may_fill_the_context(served, translator):
    assert httpx.get(served.url + "/health").json()["limits"]["max_prompt_tokens"] == translator.max_sequence_length
    words = " ".join((ENGLISH[0] + " " + ENGLISH[2]).split()[:translator.max_sequence_length])  # 12 words, 12 ids
    assert len(translator.source_tokenizer(words)) == translator.max_sequence_length
    answer = served.client().completions.create(model="translator", prompt=words, max_tokens=4, temperature=0)
    assert answer.choices[0].text == zoo.translate(translator, [words], num_beams=1, max_length=4)[0]
    with pytest.raises(openai.BadRequestError, match="context"):
        served.client().completions.create(model="translator", prompt=words + " dog", max_tokens=4)


def test_a_prompt_of_token_ids_is_read_in_the_source_vocabulary(served, translator):
    source = [int(t) for t in translator.source_tokenizer(ENGLISH[2])]
    answer = served.client().completions.create(model="translator", prompt=source, max_tokens=6, temperature=0)
    assert answer.choices[0].text == zoo.translate(translator, [ENGLISH[2]], num_beams=1, max_length=6)[0]
    with pytest.raises(openai.BadRequestError, match=rf"each in \[0, {translator.source_vocabulary_size}\)"):
        served.client().completions.create(model="translator", prompt=[translator.source_vocabulary_size],
                                           max_tokens=2)


def test_sampled_translations_follow_their_seed(served, translator):
    client = served.client()
    answer = client.completions.create(model="translator", prompt=ENGLISH[1], max_tokens=8, temperature=1.0,
                                       seed=5, n=3)
    expected = [zoo.stream(translator, ENGLISH[1], max_new_tokens=8, sampler="temperature", seed=5 + i)
                for i in range(3)]
    assert [choice.text for choice in answer.choices] == ["".join(pieces) for pieces in expected]


@pytest.mark.parametrize("fields, named", [
    (dict(echo=True), "echo"),
    (dict(logprobs=1), "logprobs"),
    (dict(n=1, best_of=2, temperature=1.0), "best_of"),
])
def test_what_an_encoder_decoder_does_not_answer_is_refused_in_one_line(served, fields, named):
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().completions.create(model="translator", prompt=ENGLISH[0], max_tokens=4, **fields)
    error = caught.value.body
    assert error["param"] == named and "encoder-decoder" in error["message"] and "\n" not in error["message"]
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        served.client().chat.completions.create(model="translator", messages=[{"role": "user", "content": "hi"}])
