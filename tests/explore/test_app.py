"""`zoo explore`'s server through Starlette's TestClient: every endpoint for
each model kind, the answers checked against the public API that computes
them (`zoo.generate`, `zoo.translate`, `zoo.classify`, the models' own
logits), and every refused input answered with status 400 and one line
naming the field and what was expected."""

import json

import numpy as np
import pytest

pytest.importorskip("starlette", reason="zoo explore needs the explore extra: pip install -e .[explore]")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

import zoo  # noqa: E402
from zoo.explore import explorer as engine  # noqa: E402
from zoo.explore.protocol import GenerateRequest  # noqa: E402

PROMPT = "ROMEO: my"


def events(response):
    """The (event, data) pairs of a server-sent-event stream."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    pairs = []
    for frame in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        pairs.append((lines["event"], json.loads(lines["data"])))
    return pairs


def generate(client, **body):
    return events(client.post("/api/generate", json={"prompt": PROMPT, **body}))


def softmax(x):
    x = np.asarray(x, "float64")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --- The page ---------------------------------------------------------------------------


def test_the_page_and_its_static_files_are_served_and_reach_no_other_host(clients):
    client = clients["language_model"]
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    texts = [page.text]
    for name in ("app.js", "style.css"):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert f"/static/{name}" in page.text
        texts.append(response.text)
    for text in texts:  # no CDN, no font or script from elsewhere
        assert "://" not in text
    assert client.get("/static/missing.js").status_code == 404


@pytest.mark.parametrize(
    "kind, model, layers",
    [("language_model", "GPTCausalLM", 2), ("translator", "EncoderDecoder", 2), ("classifier", "BertClassifier", 2)],
)
def test_info_names_the_kind_and_sizes(clients, kind, model, layers):
    info = clients[kind].get("/api/info").json()
    assert (info["kind"], info["model"], info["num_layers"], info["num_heads"], info["context"]) == (
        kind, model, layers, 4, 32,
    )
    assert info["labels"] == (["negative", "positive"] if kind == "classifier" else None)


def test_info_has_a_model_card_with_the_runs_recipe_and_figures(clients, models):
    card = clients["language_model"].get("/api/info").json()["card"]
    lm = models["language_model"]
    assert card == {
        "family": "gpt", "task": None, "preset": "gpt-nano", "parameters": lm.count_params(),
        "num_layers": 2, "num_heads": 4, "hidden_dim": 32, "context": 32,
        "tokenizer": f"CharTokenizer, {lm.tokenizer.vocabulary_size()} tokens",
        "recipe": "gpt_char", "results": {"val_loss": 1.9105},  # figures only
    }
    card = clients["classifier"].get("/api/info").json()["card"]  # a .keras file: no run
    assert (card["family"], card["task"], card["preset"], card["recipe"], card["results"]) == (
        "bert", "classifier", None, None, {},
    )
    assert card["parameters"] == models["classifier"].count_params()


def test_run_record_reads_a_run_folders_run_json_only(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps({"recipe": "translate", "results": {"val_bleu": 38.0}}))
    (tmp_path / "run" / "model.keras").write_bytes(b"")
    assert engine.run_record(tmp_path / "run") == {"recipe": "translate", "results": {"val_bleu": 38.0}}
    assert engine.run_record(tmp_path / "run" / "model.keras") is None
    assert engine.run_record(tmp_path) is None


def test_two_generations_at_once_both_finish_with_their_own_tokens(clients, models):
    from concurrent.futures import ThreadPoolExecutor

    client = clients["language_model"]
    bodies = [{"prompt": "ROMEO: my", "max_new_tokens": 20}, {"prompt": "JULIET: o", "max_new_tokens": 14}]
    with ThreadPoolExecutor(max_workers=2) as pool:
        streams = list(pool.map(lambda body: events(client.post("/api/generate", json=body)), bodies))
    for body, stream in zip(bodies, streams):
        assert [name for name, _ in stream] == ["prompt"] + ["token"] * body["max_new_tokens"] + ["done"]
        expected = zoo.generate(models["language_model"], body["prompt"], max_new_tokens=body["max_new_tokens"])
        assert stream[-1][1]["text"] == expected


# --- Language model ---------------------------------------------------------------------


@pytest.mark.parametrize("new_tokens", [5, 40])  # 40: past the context of 32, the sliding window
def test_the_stream_yields_the_tokens_of_zoo_generate_greedy(clients, models, new_tokens):
    stream = generate(clients["language_model"], max_new_tokens=new_tokens)
    names = [name for name, _ in stream]
    assert names == ["prompt"] + ["token"] * new_tokens + ["done"]
    prompt = "".join(token["text"] for token in stream[0][1]["tokens"])
    new = "".join(data["text"] for name, data in stream if name == "token")
    expected = zoo.generate(models["language_model"], PROMPT, max_new_tokens=new_tokens)
    assert prompt == PROMPT and prompt + new == expected
    assert stream[-1][1]["text"] == expected
    indices = [data["index"] for name, data in stream if name == "token"]
    assert indices == list(range(len(PROMPT), len(PROMPT) + new_tokens))
    assert all(0 < data["probability"] <= 1 for name, data in stream if name == "token")


def test_sampling_is_reproducible_by_seed_and_its_narrowest_settings_are_greedy(clients):
    client = clients["language_model"]
    greedy = generate(client, max_new_tokens=12)[-1][1]["text"]
    first = generate(client, max_new_tokens=12, sampler="temperature", temperature=2.0, seed=1)[-1][1]["text"]
    again = generate(client, max_new_tokens=12, sampler="temperature", temperature=2.0, seed=1)[-1][1]["text"]
    other = generate(client, max_new_tokens=12, sampler="temperature", temperature=2.0, seed=2)[-1][1]["text"]
    assert first == again and first != other
    assert generate(client, max_new_tokens=12, sampler="top_k", top_k=1, seed=5)[-1][1]["text"] == greedy
    assert generate(client, max_new_tokens=12, sampler="top_p", top_p=1e-6, seed=5)[-1][1]["text"] == greedy


@pytest.mark.parametrize("sampler, settings", [("temperature", {"temperature": 1.5}), ("top_k", {"top_k": 5}),
                                               ("top_p", {"top_p": 0.8, "temperature": 0.9})])
@pytest.mark.parametrize("new_tokens", [6, 40])  # 40: past the context of 32
def test_a_sampled_stream_is_zoo_generate_with_the_same_seed(clients, models, sampler, settings, new_tokens):
    stream = generate(clients["language_model"], max_new_tokens=new_tokens, sampler=sampler, seed=11, **settings)
    options = {"top_k": settings.get("top_k", 50), "top_p": settings.get("top_p", 0.9),
               "temperature": settings.get("temperature", 1.0)}
    expected = zoo.generate(models["language_model"], PROMPT, max_new_tokens=new_tokens, sampler=sampler, seed=11,
                            **options)
    assert stream[-1][1]["text"] == expected


def test_the_stream_stops_at_the_tokenizers_end_token(explorers, monkeypatch):
    explorer = explorers["language_model"]
    request = GenerateRequest(prompt=PROMPT, max_new_tokens=10)
    ids = explorer.check_generate(request)
    first = next(explorer.stream(request, ids)).id
    # The first greedy token now ends the sequence.
    monkeypatch.setattr(type(explorer.tokenizer), "end_token_ids", property(lambda self: (first,)))
    monkeypatch.setattr(type(explorer.tokenizer), "end_token_id", property(lambda self: first))
    assert [token.id for token in explorer.stream(request, ids)] == [first]


@pytest.mark.parametrize("position", [3, 40])  # 40: its window is the last 32 tokens
def test_inspect_gives_a_tokens_attention_row_and_the_models_next_token_probabilities(clients, models, position):
    ids = generate(clients["language_model"], max_new_tokens=40)[-1][1]["ids"]
    answer = clients["language_model"].post("/api/inspect", json={"ids": ids, "position": position}).json()
    start = max(0, position + 1 - 32)
    window = ids[start : position + 1]
    assert answer["start"] == start and [t["id"] for t in answer["tokens"]] == window
    attention = np.array(answer["attention"])
    assert attention.shape == (2, 4, len(window))  # (N, h, W)
    np.testing.assert_allclose(attention.sum(axis=-1), 1.0, atol=1e-3)
    scores = models["language_model"].attention_scores({"token_ids": np.array([window])})["self"]
    np.testing.assert_allclose(attention, np.asarray(scores)[:, 0, :, -1, :], atol=1e-4)
    logits = models["language_model"].predict_on_batch({"token_ids": np.array([window])})[0, -1]
    probabilities = softmax(logits)
    top = answer["top"]
    assert [t["id"] for t in top] == list(np.argsort(-probabilities, kind="stable")[:10])
    np.testing.assert_allclose([t["probability"] for t in top], np.sort(probabilities)[::-1][:10], rtol=1e-5)
    assert answer["next"] == ids[position + 1]


def test_inspect_of_the_last_token_has_no_next(clients):
    ids = [10, 20, 30]
    answer = clients["language_model"].post("/api/inspect", json={"ids": ids, "position": 2}).json()
    assert answer["next"] is None and len(answer["top"]) == 10


# --- Translator -------------------------------------------------------------------------


@pytest.mark.parametrize("beams", [1, 3])
def test_translate_gives_zoo_translates_text_and_its_cross_attention(clients, models, beams):
    source = "Two dogs run in the snow."
    answer = clients["translator"].post("/api/translate", json={"source": source, "num_beams": beams}).json()
    assert answer["translation"] == zoo.translate(models["translator"], [source], num_beams=beams)[0]
    cross = np.array(answer["cross"])
    assert cross.shape == (2, 4, len(answer["target_tokens"]), len(answer["source_tokens"]))  # (N, h, T, S)
    np.testing.assert_allclose(cross.sum(axis=-1), 1.0, atol=1e-3)
    assert [t["id"] for t in answer["source_tokens"]] == [int(t) for t in np.asarray(models["translator"].tokenizer(source))]


# --- Classifier -------------------------------------------------------------------------


def test_classify_gives_zoo_classifys_probabilities_and_the_cls_attention_row(clients, models):
    text = "the acting is superb"
    answer = clients["classifier"].post("/api/classify", json={"text": text}).json()
    expected = zoo.classify(models["classifier"], [text], label_names=["negative", "positive"])
    np.testing.assert_allclose(answer["probabilities"], expected.probabilities[0], rtol=1e-6)
    assert answer["label"] == expected.labels[0] and answer["labels"] == ["negative", "positive"]
    tokens = [t["text"] for t in answer["tokens"]]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    attention = np.array(answer["attention"])
    assert attention.shape == (2, 4, len(tokens))  # (N, h, T)
    np.testing.assert_allclose(attention.sum(axis=-1), 1.0, atol=1e-3)


# --- Refusals ---------------------------------------------------------------------------

REFUSED = [
    ("language_model", "/api/generate", {"prompt": ""}, "prompt", "non-empty string"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "sampler": "beam"}, "sampler", "greedy, temperature"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "max_new_tokens": 0}, "max_new_tokens", "[1, 1024]"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "max_new_tokens": 2.5}, "max_new_tokens", "integer"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "temperature": 0}, "temperature", "> 0"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "top_k": 66}, "top_k", "[1, 65]"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "top_p": 1.5}, "top_p", "(0, 1]"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "seed": -1}, "seed", "integer"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "promt": "x"}, "promt", "unknown field"),
    ("language_model", "/api/generate", {"prompt": "\u00e9\u00e9"}, "prompt", "not in the vocabulary"),
    ("language_model", "/api/generate", {"prompt": "a" * 10_001}, "prompt",
     "at most 10000 characters; got 10001 characters"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "max_new_tokens": "5"}, "max_new_tokens",
     "integer in [1, 1024]; got '5'"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "temperature": "hot"}, "temperature", "> 0; got 'hot'"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "seed": True}, "seed", "; got true"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "max_new_tokens": None}, "max_new_tokens", "got null"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "top_k": 0}, "top_k", "integer in [1, the vocab"),
    ("language_model", "/api/generate", {"prompt": "ROMEO", "top_p": 0}, "top_p", "(0, 1]; got 0"),
    ("language_model", "/api/generate", {"max_new_tokens": 5}, "prompt", "missing; expected a non-empty string"),
    ("language_model", "/api/generate", {"prompt": ["ROMEO"]}, "prompt", "non-empty string"),
    ("translator", "/api/translate", {"source": "dog " * 2_501}, "source",
     "at most 10000 characters; got 10004 characters"),
    ("classifier", "/api/classify", {"text": "fun " * 2_501}, "text", "at most 10000 characters; got 10004 characters"),
    ("language_model", "/api/inspect", {"ids": [1, 99], "position": 0}, "ids", "[0, 65); got 99"),
    ("language_model", "/api/inspect", {"ids": [1, -2], "position": 0}, "ids[1]", "the vocabulary's size); got -2"),
    ("language_model", "/api/inspect", {"ids": [], "position": 0}, "ids", "non-empty list"),
    ("language_model", "/api/inspect", {"ids": [1, 2], "position": "1"}, "position", "in [0, len(ids) - 1]"),
    ("language_model", "/api/inspect", {"ids": [1, 2], "position": 2}, "position", "[0, 1]"),
    ("language_model", "/api/inspect", {"ids": [1, 2]}, "position", "missing"),
    ("language_model", "/api/translate", {"source": "a dog"}, "/api/translate", "needs a translator"),
    ("translator", "/api/translate", {"source": " "}, "source", "non-empty sentence"),
    ("translator", "/api/translate", {"source": "a dog", "num_beams": 0}, "num_beams", "[1, 16]"),
    ("translator", "/api/translate", {"source": "a dog", "num_beams": 2.0}, "num_beams",
     "[1, 16] (1: greedy); got 2.0"),
    ("translator", "/api/translate", {"source": "a dog", "length_penalty": "long"}, "length_penalty", "a number"),
    ("translator", "/api/inspect", {"ids": [1], "position": 0}, "/api/inspect", "needs a language model"),
    ("classifier", "/api/classify", {"text": 5}, "text", "non-empty sentence"),
    ("classifier", "/api/generate", {"prompt": "a"}, "/api/generate", "needs a language model"),
]


@pytest.mark.parametrize("kind, path, body, field, expected", REFUSED, ids=lambda v: str(v)[:30])
def test_bad_input_is_refused_with_400_and_a_line_naming_the_field_and_the_expectation(
    clients, kind, path, body, field, expected
):
    response = clients[kind].post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    message = error["message"]
    assert message.startswith(field) and expected in message and "\n" not in message, message
    assert error["type"] == "invalid_request_error"
    assert error["param"] == (None if field.startswith("/") else field.split("[")[0]), error


def test_unknown_fields_are_refused_by_name(clients):
    response = clients["language_model"].post("/api/generate", json={"prompt": "ROMEO", "tokens": 5, "temp": 1})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == ("tokens, temp: unknown fields; expected some of prompt, max_new_tokens, sampler, "
                                "temperature, top_k, top_p, seed")
    assert error["param"] == "tokens"
    response = clients["classifier"].post("/api/classify", json={"text": "fun", "labels": ["a"]})
    assert response.json()["error"] == {"message": "labels: unknown field; expected some of text",
                                        "type": "invalid_request_error", "param": "labels", "code": None}


def test_what_the_page_sends_is_taken(clients):
    """The page's script sends its number inputs as JSON numbers (`Number(input.value)`), integers where the
    input holds one: "1.0" is sent as 1, taken by a number field."""
    body = {"prompt": "ROMEO", "sampler": "top_p", "max_new_tokens": 3, "temperature": 1, "top_k": 40, "top_p": 1,
            "seed": 0}
    assert [name for name, _ in events(clients["language_model"].post("/api/generate", json=body))] == [
        "prompt", "token", "token", "token", "done"]
    body = {"source": "a dog", "num_beams": 1, "length_penalty": 1}
    assert clients["translator"].post("/api/translate", json=body).status_code == 200


def test_openapi_describes_the_explorers_requests_and_answers(clients):
    client = clients["language_model"]
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for name in ("GenerateRequest", "InspectRequest", "TranslateRequest", "ClassifyRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    generate = schemas["GenerateRequest"]["properties"]
    assert generate["max_new_tokens"]["maximum"] == 1024 and generate["max_new_tokens"]["default"] == 50
    assert generate["sampler"]["enum"] == list(engine.protocol.SAMPLERS)
    assert generate["top_p"]["exclusiveMinimum"] == 0 and generate["top_p"]["maximum"] == 1
    assert generate["prompt"]["maxLength"] == 10_000 and "prompt" in schemas["GenerateRequest"]["required"]
    assert schemas["InspectRequest"]["required"] == ["ids", "position"]
    assert schemas["TranslateRequest"]["properties"]["num_beams"]["maximum"] == 16
    paths = document["paths"]
    for path, request in (("/api/generate", "GenerateRequest"), ("/api/inspect", "InspectRequest"),
                          ("/api/translate", "TranslateRequest"), ("/api/classify", "ClassifyRequest")):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{request}"}, path
    assert "text/event-stream" in paths["/api/generate"]["post"]["responses"]["200"]["content"]
    answer = paths["/api/inspect"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/InspectResponse"}
    assert set(schemas["Info"]["properties"]) == set(client.get("/api/info").json())
    assert "/" not in paths
    assert client.get("/docs").status_code == 200


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b""])
def test_a_body_that_is_not_a_json_object_is_refused(clients, body):
    response = clients["language_model"].post("/api/generate", content=body)
    assert response.status_code == 400
    assert "expected a JSON object" in response.json()["error"]["message"]


def test_a_get_of_a_post_endpoint_is_refused(clients):
    assert clients["language_model"].get("/api/generate").status_code == 405


# --- Opening a target -------------------------------------------------------------------


def test_open_target_reads_a_run_folder_a_keras_file_and_a_checkpoint_folder(tmp_path, models):
    from tests.checkpoints.stand_ins import hf_gpt2_folder

    lm = models["language_model"]
    (tmp_path / "run").mkdir()
    zoo.save(lm, tmp_path / "run" / "model.keras")
    for target in (tmp_path / "run", tmp_path / "run" / "model.keras"):
        model = engine.open_target(target)
        assert engine.kind_of(model) == "language_model"
        np.testing.assert_array_equal(model.get_weights()[0], lm.get_weights()[0])
    checkpoint = engine.open_target(hf_gpt2_folder(tmp_path / "gpt2", max_sequence_length=64))
    assert engine.kind_of(checkpoint) == "language_model" and checkpoint.max_sequence_length == 64
    explorer = engine.Explorer(checkpoint)  # GPT-2's byte-pair tokenizer and its end token
    request = GenerateRequest(prompt="Hello world", max_new_tokens=4)
    prompt = explorer.check_generate(request)
    ids = prompt + [token.id for token in explorer.stream(request, prompt)]
    assert explorer.decode(ids) == zoo.generate(checkpoint, "Hello world", max_new_tokens=4)
    assert "".join(token.text for token in explorer.tokens(prompt)) == "Hello world"


def test_open_target_and_kind_of_refuse_what_they_cannot_show(tmp_path):
    with pytest.raises(ValueError, match="not found; expected a run folder"):
        engine.open_target(tmp_path / "missing")
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "run.json").write_text('{"recipe": "gpt_char", "finished": false}')
    with pytest.raises(ValueError, match="the unfinished run has no model.keras; expected a run that trained"):
        engine.open_target(tmp_path / "unfinished")
    with pytest.raises(ValueError, match="no such file; expected a .keras file"):
        engine.open_target(tmp_path / "missing.keras")
    with pytest.raises(ValueError, match="shows a causal LM, an EncoderDecoder or a BertClassifier; got a BertMaskedLM"):
        engine.kind_of(zoo.build("bert-tiny", task="masked_lm"))
    with pytest.raises(ValueError, match="carries no tokenizer"):
        engine.kind_of(zoo.build("gpt-nano", task="causal_lm"))


def test_labels_must_match_the_classifiers_classes(models):
    with pytest.raises(ValueError, match="names 3 classes but the model has 2"):
        engine.Explorer(models["classifier"], labels=["a", "b", "c"])
