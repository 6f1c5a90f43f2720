"""The server's requests are declared (`zoo.serve.protocol`): a body that
fails its model gets a 400 in OpenAI's error shape whose `param` names the
field, and `/openapi.json` describes every request."""

import httpx
import pytest

from tests.serve.conftest import CONTEXT

pytest.importorskip("fastapi")
pytest.importorskip("openai")

PROMPT = "ROMEO: "
CHAT = [{"role": "user", "content": "hi"}]
REFUSED = [
    ("/v1/completions", {"prompt": PROMPT, "suffx": "x"}, "suffx", "suffx: unknown field; expected some of model, "),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": "abc"}, "max_tokens",
     "max_tokens: expected an integer >= 1, the answer's most tokens (0 with echo: the prompt scored alone); got 'abc'"),
    ("/v1/completions", {"prompt": PROMPT, "temperature": -1}, "temperature",
     "temperature: expected a number in [0, 2] (0: greedy); got -1"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": True}, "max_tokens", "got true"),
    ("/v1/completions", {"prompt": PROMPT, "n": "2"}, "n", "expected an integer in [1, --max-batch]"),
    ("/v1/completions", {"max_tokens": 4}, "prompt", "prompt: missing; expected a non-empty string"),
    ("/v1/completions", {"prompt": PROMPT, "stream": True, "stream_options": {"usage": True}}, "stream_options",
     'stream_options.usage: unknown field; expected {"include_usage": true or false}'),
    ("/v1/chat/completions", {"messages": 3}, "messages",
     'messages: expected a non-empty list of at most 1024 {"role": str, "content": str} objects; got 3'),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages",
     'messages[0]: expected a non-empty list of at most 1024 {"role": str, "content": str} objects; got {"role": '),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": 1}, "logprobs", "logprobs: expected true or false"),
    ("/v1/embeddings", {"input": "a", "dimensions": 8}, "dimensions", "dimensions: unknown field"),
    ("/v1/completions", {"prompt": PROMPT, "suffix": "x", "best": 2}, "suffix", "suffix, best: unknown fields; expected"),
    ("/tokenize", {"prompt": 5}, "prompt", "prompt: expected a string; got 5"),
]


@pytest.mark.parametrize("path, body, param, words", REFUSED, ids=[f"{r[0]}-{r[2]}" for r in REFUSED])
def test_a_body_that_fails_its_model_gets_a_400_naming_the_field_and_the_server_goes_on(
    served, path, body, param, words
):
    response = httpx.post(served.url + path, json={"model": "lm", **body}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"] and "\n" not in error["message"], error
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=2, temperature=0)
    assert len(answer.choices[0].text) == 2  # the server stays up, and answers


def test_the_official_client_reads_a_refusal_of_its_model(served):
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        served.client().completions.create(model="lm", prompt=PROMPT, temperature=-1)
    assert caught.value.body["param"] == "temperature" and caught.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().chat.completions.create(model="lm", messages=CHAT, extra_body={"top_k": 3})
    assert caught.value.body["param"] == "top_k" and "unknown field" in caught.value.body["message"]


def test_an_unknown_path_and_a_wrong_method_get_openais_error_shape_too(served):
    missing = httpx.post(served.url + "/v1/completion", json={"prompt": PROMPT}, timeout=60)
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "POST /v1/completion: Not Found"
    wrong = httpx.get(served.url + "/v1/completions", timeout=60)
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"
    assert wrong.headers["allow"] == "POST"


def test_openapi_describes_the_requests_and_their_bounds(served):
    document = httpx.get(served.url + "/openapi.json", timeout=60).json()
    schemas = document["components"]["schemas"]
    for path, name in [("/v1/completions", "CompletionRequest"), ("/v1/chat/completions", "ChatRequest"),
                       ("/v1/embeddings", "EmbeddingRequest"), ("/tokenize", "TokenizeRequest")]:
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{name}"}
        assert schemas[name]["additionalProperties"] is False  # unknown fields are refused
    completion = schemas["CompletionRequest"]["properties"]
    temperature = [s for s in completion["temperature"]["anyOf"] if s.get("type") == "number"][0]
    assert (temperature["minimum"], temperature["maximum"]) == (0, 2)
    assert schemas["CompletionRequest"]["required"] == ["prompt"]
    assert schemas["ChatRequest"]["properties"]["messages"]["maxItems"] == 1024
    assert "ChatMessage" in schemas and "StreamOptions" in schemas
    answers = document["paths"]["/v1/completions"]["post"]["responses"]["200"]["content"]["application/json"]
    assert answers["schema"] == {"$ref": "#/components/schemas/CompletionResponse"}
    docs = httpx.get(served.url + "/docs", timeout=60)
    assert docs.status_code == 200 and "/openapi.json" in docs.text


def test_every_answer_is_its_model(served):
    from zoo.serve import protocol

    http = httpx.Client(base_url=served.url, timeout=60)
    protocol.ModelList.model_validate(http.get("/v1/models").json())
    health = protocol.Health.model_validate(http.get("/health").json())
    assert health.limits.context_tokens == CONTEXT
    answer = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, "logprobs": 2, "echo": True}).json()
    assert protocol.CompletionResponse.model_validate(answer).choices[0].logprobs.tokens[0] == "R"
    protocol.TokenizeResponse.model_validate(http.post("/tokenize", json={"prompt": PROMPT}).json())


@pytest.mark.parametrize("body, param, message", [
    (b'{"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}', "stop", "; got 5 items"),
    (b'{"prompt": "a", "stop": "' + b"a" * 257 + b'"}', "stop", "; got 257 characters"),
    (b'{"prompt": "a", "logit_bias": {"-1": 3}}', "logit_bias", "token ids to biases in [-100, 100]"),
    (b'{"prompt": "a", "seed": 1.5}', "seed", "seed: expected an integer; got 1.5"),
    (b'{"prompt": "a", "top_p": NaN}', "top_p", "top_p: expected a number in (0, 1]"),
    (b'{"prompt": ""}', "prompt", "got 0 characters"),
    (b'{"prompt": ["a", 3]}', "prompt", '; got ["a", 3]'),
    (b'{"prompt": [[]]}', "prompt", "a list of token ids"),
    (b'{"prompt": [-1]}', "prompt", "a list of token ids"),
    (b"[1, 2]", None, "the body is a list; expected a JSON object"),
    (b"", None, "the body is null; expected a JSON object"),
    (b'{"prompt": "a"', None, "the body is not JSON (EOF while parsing"),
])
def test_a_refusal_says_the_field_what_it_expects_and_what_came(body, param, message):
    from zoo.serve.protocol import CompletionRequest
    from zoo.serve.validation import parse
    from zoo.serve.web import RequestError

    with pytest.raises(RequestError) as caught:
        parse(CompletionRequest, body)
    assert caught.value.param == param and message in str(caught.value) and caught.value.status == 400, caught.value
    assert parse(CompletionRequest, b'{"prompt": [1, 2], "stop": "a", "logit_bias": {"3": -100}}').prompt == [1, 2]
