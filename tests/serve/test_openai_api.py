"""`zoo serve` answers the official `openai` client with `zoo.generate`'s tokens.

Each server runs on 127.0.0.1 in this process; the client is the `openai`
package. Completions and chat, streamed and not; greedy answers against
`zoo.generate`; streamed chunks against the whole answer; `usage` against
the tokenizer; every refusal in OpenAI's error shape, the server still
answering after it; concurrent clients each getting the answer they would
get alone; a client that leaves stops its decoding.
"""

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import zoo
from tests.serve.conftest import CONTEXT, Server

pytest.importorskip("openai")
pytest.importorskip("starlette")

PROMPT = "ROMEO: "


def expected(lm, prompt=PROMPT, max_tokens=16, **options):
    """What zoo.generate gives: the new text only."""
    text = zoo.generate(lm, prompt, max_new_tokens=max_tokens, **options)
    assert text.startswith(prompt)
    return text[len(prompt):]


# --- Completions -------------------------------------------------------------------------------


def test_models_lists_the_one_model(served):
    models = served.client().models.list()
    assert [m.id for m in models.data] == ["lm"]


def test_a_greedy_completion_is_zoo_generate(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=12, temperature=0)
    assert answer.choices[0].text == expected(lm, max_tokens=12)
    assert answer.choices[0].finish_reason == "length"
    usage = answer.usage
    assert usage.prompt_tokens == len(lm.tokenizer(PROMPT)) == len(PROMPT)
    assert usage.completion_tokens == 12 and usage.total_tokens == usage.prompt_tokens + 12


@pytest.mark.parametrize("options", [dict(temperature=0.8, seed=4), dict(temperature=1.3, top_p=0.7, seed=9)])
def test_a_seeded_sampled_completion_is_zoo_generate_with_that_seed(served, lm, options):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=14, **options)
    sampler = dict(sampler="top_p", top_p=options["top_p"]) if "top_p" in options else dict(sampler="temperature")
    assert answer.choices[0].text == expected(lm, max_tokens=14, seed=options["seed"],
                                              temperature=options["temperature"], **sampler)


@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.9, seed=2)])
def test_streamed_chunks_join_to_the_whole_answer(served, options):
    client = served.client()
    whole = client.completions.create(model="lm", prompt=PROMPT, max_tokens=20, **options)
    chunks = list(client.completions.create(model="lm", prompt=PROMPT, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True}, **options))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole.choices[0].text
    assert len([t for t in texts if t]) > 1  # pieces, not one block at the end
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 20


def test_a_stop_string_ends_the_answer_before_it(served, lm):
    free = expected(lm, max_tokens=20)
    stop = free[5:7]
    cut = free.index(stop)
    client = served.client()
    answer = client.completions.create(model="lm", prompt=PROMPT, max_tokens=20, temperature=0, stop=[stop])
    assert answer.choices[0].text == free[:cut] and answer.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="lm", prompt=PROMPT, max_tokens=20, temperature=0, stop=stop,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == free[:cut]


def test_the_raw_stream_is_openais_server_sent_events(served):
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", served.url + "/v1/completions", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunk = json.loads(lines[0][len("data: "):])
    assert chunk["object"] == "text_completion" and chunk["choices"][0]["index"] == 0


# --- Refusals ----------------------------------------------------------------------------------


REFUSALS = [
    ("/v1/completions", b"{not json", 400, None, "not JSON"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "temperature": "hot"}, 400, "temperature", "a number in [0, 2]"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "top_p": 0}, 400, "top_p", "(0, 1]"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens", "[1, 25]"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "max_tokens": 26}, 400, "max_tokens", "[1, 25]"),
    ("/v1/completions", {"model": "lm", "prompt": "R" * CONTEXT}, 400, "prompt", "context is 32 tokens"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "stop": [""]}, 400, "stop", "non-empty strings"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "n": 9}, 400, "n", "[1, 8]"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "n": 2, "best_of": 1}, 400, "best_of", "[2, 8]"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "n": 2, "stream": True}, 400, "stream", "one sample"),
    ("/v1/completions", {"model": "lm", "prompt": PROMPT, "suffix": "x"}, 400, "suffix", "unknown field"),
    ("/v1/completions", {"model": "lm", "prompt": "Zebra"}, 400, "prompt", "not in the vocabulary"),
    ("/v1/completions", {"model": "lm", "prompt": ""}, 400, "prompt", "non-empty string"),
    ("/v1/completions", {"model": "other", "prompt": PROMPT}, 404, "model", "not served here"),
    ("/v1/chat/completions", {"model": "lm", "messages": [{"role": "user", "content": "hi"}]}, 400, "messages",
     "no chat template"),
    ("/v1/chat/completions", {"model": "lm", "messages": "hi"}, 400, "messages", "non-empty list"),
]


@pytest.mark.parametrize("path, body, status, param, words", REFUSALS, ids=[f"{r[3]}-{r[4]}" for r in REFUSALS])
def test_a_refused_request_gets_its_status_and_openais_error_shape_and_the_server_goes_on(
    served, lm, path, body, status, param, words
):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(served.url + path, content=content, headers={"content-type": "application/json"},
                          timeout=60)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param"} and error["param"] == param
    assert words in error["message"] and "\n" not in error["message"]
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=4, temperature=0)
    assert answer.choices[0].text == expected(lm, max_tokens=4)


def test_the_official_client_raises_its_own_errors_for_refusals(served):
    import openai

    client = served.client()
    with pytest.raises(openai.BadRequestError, match="max_tokens: expected an integer"):
        client.completions.create(model="lm", prompt=PROMPT, max_tokens=1000)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.completions.create(model="gpt-4o", prompt=PROMPT)


def test_an_api_key_is_required_when_set(lm):
    import openai

    server = Server(lm, api_key="s3cret")
    try:
        with pytest.raises(openai.AuthenticationError, match="wrong API key"):
            server.client(api_key="wrong").completions.create(model="lm", prompt=PROMPT, max_tokens=2)
        response = httpx.get(server.url + "/v1/models", timeout=30)
        assert response.status_code == 401 and "Authorization: Bearer" in response.json()["error"]["message"]
        answer = server.client(api_key="s3cret").completions.create(model="lm", prompt=PROMPT, max_tokens=3,
                                                                     temperature=0)
        assert answer.choices[0].text == expected(lm, max_tokens=3)
    finally:
        server.stop()


# --- Concurrency ---------------------------------------------------------------------------------


@pytest.mark.integration  # eight clients at once: an end-to-end run of the server
def test_eight_concurrent_clients_with_different_seeds_each_get_their_answer_alone(served, lm):
    prompts = ["ROMEO: ", "JULIET: ", "But soft, ", "Ay me", "what light ", "window ", "R", "yonder "]

    def ask(i):
        return served.client().completions.create(model="lm", prompt=prompts[i], max_tokens=10 + i, seed=100 + i,
                                                  temperature=1.0, stream=i % 2 == 0)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, range(8)))
    for i, answer in enumerate(answers):
        text = "".join(c.choices[0].text for c in answer) if i % 2 == 0 else answer.choices[0].text
        assert text == expected(lm, prompts[i], max_tokens=10 + i, seed=100 + i, sampler="temperature")


@pytest.mark.integration  # eight clients at once: an end-to-end run of the server
def test_concurrent_greedy_requests_are_batched_and_each_equals_zoo_generate(lm):
    server = Server(lm)
    server.service.scheduler.gather_seconds = 0.3  # all eight arrive before the batch starts
    prompts = ["ROMEO: ", "JULIET: Ay", "But ", "what light through ", "window", "R", "yonder window ", "soft"]
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda p: server.client().completions.create(
                model="lm", prompt=p, max_tokens=8, temperature=0), prompts))
        for prompt, answer in zip(prompts, answers):
            assert answer.choices[0].text == expected(lm, prompt, max_tokens=8)
        assert len(server.service.scheduler.ended) == 8
    finally:
        server.stop()


def test_a_client_that_leaves_stops_its_decoding(lm):
    from zoo.serve.scheduler import PIECE, Job, Scheduler

    scheduler = Scheduler(lm)
    job = scheduler.submit(Job(lm.tokenizer(PROMPT).tolist(), 25, (), "greedy", 1.0, 1.0, None))
    pieces = job.pieces()
    assert next(pieces)[0] == PIECE
    pieces.close()  # what the server does when the client disconnects
    deadline = time.time() + 30
    while not scheduler.ended and time.time() < deadline:
        time.sleep(0.01)
    (job_id, computed, reason), = scheduler.ended
    assert job_id == job.id and reason == "cancelled" and computed < 25


# --- Chat ------------------------------------------------------------------------------------------

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    from tests.checkpoints.llama_checkpoints import hf_folder

    folder = hf_folder(tmp_path_factory.mktemp("qwen") / "qwen2-chat", "qwen2")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHATML}))
    return folder


def test_chat_renders_the_checkpoints_template_and_answers_as_zoo_generate(chat_folder):
    lm = zoo.from_pretrained(chat_folder)
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "naïve café?"}]
    rendered = lm.tokenizer.render_chat(messages)
    assert rendered == ("<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nnaïve café?<|im_end|>\n"
                        "<|im_start|>assistant\n")
    ids = lm.tokenizer.apply_chat_template(messages)
    assert ids == lm.tokenizer(rendered).tolist()  # Qwen adds no BOS: the template's text, tokenized
    new = zoo.generate(lm, [ids], 10, stop_token_ids=lm.tokenizer.end_token_ids).sequences[0]
    if new and new[-1] in lm.tokenizer.end_token_ids:
        new = new[:-1]
    server = Server(lm, name="qwen")
    try:
        client = server.client()
        answer = client.chat.completions.create(model="qwen", messages=messages, max_tokens=10, temperature=0)
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].message.content == lm.tokenizer.detokenize(new)
        assert answer.usage.prompt_tokens == len(ids)
        chunks = list(client.chat.completions.create(model="qwen", messages=messages, max_tokens=10, temperature=0,
                                                     stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer.choices[0].message.content
        assert chunks[-1].choices[0].finish_reason == answer.choices[0].finish_reason
    finally:
        server.stop()


def test_a_chat_template_survives_save_and_reload(chat_folder, tmp_path):
    lm = zoo.from_pretrained(chat_folder)
    zoo.save(lm, tmp_path / "chat.keras")
    assert zoo.load(tmp_path / "chat.keras").tokenizer.chat_template == CHATML


# --- The command -----------------------------------------------------------------------------------


def test_zoo_serve_help_names_its_flags():
    done = subprocess.run([sys.executable, "-m", "recipes.cli", "serve", "-h"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    for flag in ("--port", "--host", "--api-key", "--name", "--max-batch", "--quantize", "--max-queue",
                 "--max-request-bytes", "--read-timeout"):
        assert flag in done.stdout


def test_zoo_serve_warns_when_another_address_has_no_key_and_serves(tmp_path, lm, monkeypatch, capsys):
    from starlette.testclient import TestClient

    from recipes import cli
    from zoo.serve import web

    answers = {}

    def run(app, listener):  # where uvicorn would serve until Ctrl-C: one request through the app, then stop
        answers["address"] = listener.getsockname()[0]
        answers["models"] = TestClient(app).get("/v1/models").json()
        listener.close()

    zoo.save(lm, tmp_path / "lm.keras")
    monkeypatch.setattr(web, "run", run)
    assert cli.main(["serve", str(tmp_path / "lm.keras"), "--host", "0.0.0.0", "--port", "0"]) == 0
    assert capsys.readouterr().err.startswith("zoo serve: warning: listening on 0.0.0.0 without an API key")
    assert answers["address"] == "0.0.0.0"
    assert answers["models"]["data"][0]["id"] == str(tmp_path / "lm.keras")


@pytest.mark.integration  # the command in a process of its own, listening on every address
def test_zoo_serve_in_a_process_of_its_own_warns_without_a_key_and_serves(tmp_path, lm):
    zoo.save(lm, tmp_path / "lm.keras")
    process = subprocess.Popen(
        [sys.executable, "-m", "recipes.cli", "serve", str(tmp_path / "lm.keras"), "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        warning = process.stderr.readline()
        assert "warning: listening on 0.0.0.0 without an API key" in warning
        lines = []
        while not lines or "(Ctrl-C stops)" not in lines[-1]:
            line = process.stdout.readline()
            assert line, f"zoo serve exited before it listened: {lines}"
            lines.append(line)
        assert any("limits: bodies of at most 1048576 bytes" in line for line in lines)
        url = lines[-1].split()[2]
        port = url.rsplit(":", 1)[1].split("/")[0]
        response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=60)
        assert response.json()["data"][0]["id"] == str(tmp_path / "lm.keras")
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def test_zoo_serve_refuses_a_model_that_does_not_generate_in_one_line(tmp_path, capsys):
    from recipes import cli
    from zoo.tokenizers import train_word_piece

    tokenizer = train_word_piece(["a gripping film", "a dull film"], vocabulary_size=50)
    classifier = zoo.build("bert-tiny", "classifier", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    zoo.save(classifier, tmp_path / "classifier.keras")
    assert cli.main(["serve", str(tmp_path / "classifier.keras")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert error.startswith("zoo serve: error: ") and "zoo serve serves a decoder-only language model" in error


def test_numbers_that_json_gives_as_floats_are_refused_for_integers(served):
    response = httpx.post(served.url + "/v1/completions", json={"model": "lm", "prompt": PROMPT, "max_tokens": 2.0},
                          timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"
