"""`zoo serve`'s completions `logprobs` and `echo`, as OpenAI's legacy
completions define them, and chat's `logprobs`, are `zoo.score`'s
log-probabilities; `n` samples are choices each scored as its own text,
`best_of` returns the likeliest; the tokenizer endpoints are vLLM's;
lm-evaluation-harness's own `local-completions` model, pointed at the
server, scores a multiple-choice task as `zoo.score` does."""

import json
import math
import os
import tempfile

# The harness reads the task files' JSONL through `datasets`, which reads these when it is imported.
os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="zoo-datasets-"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import zoo  # noqa: E402
from tests.serve.conftest import CONTEXT, TEXT, Server  # noqa: E402
from tests.serve.test_openai_api import chat_folder  # noqa: E402, F401  (a fixture)

pytest.importorskip("openai")
pytest.importorskip("starlette")

PROMPT = "ROMEO: But "


def ids_of(lm, text):
    return [int(t) for t in lm.tokenizer(text)]


def test_echo_with_no_new_tokens_scores_the_prompt_alone(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=0, echo=True, logprobs=3)
    choice = answer.choices[0]
    assert choice.text == PROMPT and answer.usage.completion_tokens == 0
    logprobs = choice.logprobs
    ids = ids_of(lm, PROMPT)
    score = zoo.score(lm, [ids[:1]], [ids[1:]], top_logprobs=3)[0]
    assert logprobs.tokens == list(PROMPT)  # a character tokenizer: one token per character
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    np.testing.assert_allclose(logprobs.token_logprobs[1:], score.token_logprobs, rtol=1e-6)
    assert logprobs.text_offset == list(range(len(PROMPT)))
    vocabulary = lm.tokenizer.get_vocabulary()
    for i, top in enumerate(logprobs.top_logprobs[1:]):
        alternatives = {vocabulary[t]: v for t, v in zip(score.top_ids[i], score.top_logprobs[i])}
        alternatives.setdefault(logprobs.tokens[i + 1], float(score.token_logprobs[i]))  # the token itself
        assert top == pytest.approx(alternatives, rel=1e-6)


def test_a_prompt_only_scored_may_fill_the_context(served, lm):
    """`echo` with `max_tokens: 0` reads the prompt and writes nothing: a
    prompt of the whole context, as text or as token ids, is scored."""
    text = (TEXT * 2)[:CONTEXT]
    ids = ids_of(lm, text)
    assert len(ids) == CONTEXT
    score = zoo.score(lm, [ids[:1]], [ids[1:]])[0]
    assert score.context_length == 1  # nothing cut: the model read every token
    for prompt in (text, ids):
        answer = served.client().completions.create(model="lm", prompt=prompt, max_tokens=0, echo=True, logprobs=0)
        logprobs = answer.choices[0].logprobs
        assert answer.choices[0].text == text and logprobs.token_logprobs[0] is None
        np.testing.assert_allclose(logprobs.token_logprobs[1:], score.token_logprobs, rtol=1e-6)


def test_logprobs_of_a_greedy_answer_are_its_tokens_scored_after_the_prompt(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    choice = answer.choices[0]
    text = zoo.generate(lm, PROMPT, max_new_tokens=6)[len(PROMPT):]
    assert choice.text == text and choice.logprobs.tokens == list(text)
    score = zoo.score(lm, [ids_of(lm, PROMPT)], [ids_of(lm, text)], top_logprobs=2)[0]
    np.testing.assert_allclose(choice.logprobs.token_logprobs, score.token_logprobs, rtol=1e-6)
    assert score.is_greedy
    for token, value, top in zip(choice.logprobs.tokens, choice.logprobs.token_logprobs, choice.logprobs.top_logprobs):
        assert len(top) == 2 and top[token] == value == max(top.values())  # greedy: the most likely token
    assert choice.logprobs.text_offset == [len(PROMPT) + i for i in range(6)]  # in the prompt, then the answer


def test_echo_of_an_answer_puts_the_prompt_first_and_scores_both(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=4, temperature=0, echo=True,
                                                logprobs=0)
    choice = answer.choices[0]
    text = zoo.generate(lm, PROMPT, max_new_tokens=4)
    assert choice.text == text
    ids = ids_of(lm, text)
    score = zoo.score(lm, [ids[:1]], [ids[1:]])[0]
    assert choice.logprobs.tokens == list(text) and choice.logprobs.token_logprobs[0] is None
    np.testing.assert_allclose(choice.logprobs.token_logprobs[1:], score.token_logprobs, rtol=1e-6)
    assert all(len(top) == 1 for top in choice.logprobs.top_logprobs[1:])  # logprobs 0: the token itself


def test_a_list_of_token_id_prompts_gets_one_choice_each_as_each_alone(served, lm):
    prompts = [ids_of(lm, "ROMEO: "), ids_of(lm, "JULIET: Ay"), ids_of(lm, "But soft")]
    client = served.client()
    together = client.completions.create(model="lm", prompt=prompts, max_tokens=5, temperature=0, logprobs=1)
    assert [c.index for c in together.choices] == [0, 1, 2]
    for prompt, choice in zip(prompts, together.choices):
        alone = client.completions.create(model="lm", prompt=prompt, max_tokens=5, temperature=0, logprobs=1)
        assert choice.text == alone.choices[0].text
        np.testing.assert_allclose(choice.logprobs.token_logprobs, alone.choices[0].logprobs.token_logprobs,
                                   rtol=1e-5)
    assert together.usage.prompt_tokens == sum(len(p) for p in prompts)
    assert together.usage.completion_tokens == 15


def test_the_tokenizer_endpoints_are_vllms(served, lm):
    with httpx.Client(base_url=served.url, timeout=60) as http:
        info = http.get("/tokenizer_info").json()
        assert "eos_token" in info and info["model_max_length"] == CONTEXT
        tokens = http.post("/tokenize", json={"prompt": PROMPT, "add_special_tokens": False}).json()
        assert tokens["tokens"] == ids_of(lm, PROMPT) and tokens["count"] == len(PROMPT)
        assert http.post("/detokenize", json={"tokens": tokens["tokens"]}).json() == {"prompt": PROMPT}
        refused = http.post("/detokenize", json={"tokens": [10**6]})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "tokens"


@pytest.mark.parametrize("body, param, message", [
    ({"logprobs": 6}, "logprobs", "[0, 5]"),
    ({"logprobs": True}, "logprobs", "[0, 5]"),
    ({"echo": "yes"}, "echo", "true or false"),
    ({"echo": True, "logprobs": 1, "stream": True}, "stream", "without echo or logprobs"),
    ({"prompt": [PROMPT, PROMPT], "stream": True}, "stream", "one prompt"),
    ({"prompt": [[1, 2, 10**6]]}, "prompt", "token ids, each in"),
    ({"prompt": [[1] * CONTEXT]}, "prompt", f"at most {CONTEXT - 1} token ids"),
    ({"prompt": [PROMPT] * 65}, "prompt", "at most 64"),
    ({"prompt": [PROMPT, 3]}, "prompt", "a list of token ids"),
    ({"echo": True, "max_tokens": 0, "prompt": "R" * (CONTEXT + 1)}, "prompt", "at most 32"),
    ({"echo": True, "max_tokens": 0, "prompt": [[1] * (CONTEXT + 1)]}, "prompt", f"at most {CONTEXT} token ids"),
    ({"echo": True, "max_tokens": 1, "prompt": "R" * CONTEXT}, "prompt", "at most 31"),
])
def test_bad_logprobs_echo_and_prompts_are_refused_in_one_line(served, body, param, message):
    response = httpx.post(served.url + "/v1/completions", json={"model": "lm", "prompt": PROMPT, **body}, timeout=60)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param and message in error["message"]
    assert "\n" not in error["message"]


def test_the_harness_local_completions_model_scores_as_zoo_score(tmp_path):
    """lm-eval's `local-completions` with its remote tokenizer (the
    server's /tokenize): `echo`, `logprobs: 1`, `max_tokens: 1`, prompts as
    token ids in batches; the accuracy and each choice's log-likelihood
    are `zoo.score`'s (the same pairs `zoo evaluate` scores)."""
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("tenacity")  # the harness's API models need it (the eval extra)
    from lm_eval.tasks import TaskManager

    from tests.recipes.test_evaluate import CHOICE_TASK, QUESTIONS

    data = tmp_path / "choice.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in QUESTIONS), encoding="utf-8")
    (tmp_path / "choice.yaml").write_text(CHOICE_TASK.format(data=data), encoding="utf-8")
    model = evaluated_model()
    server = Server(model)
    try:
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=f"base_url={server.url}/v1/completions,tokenizer_backend=remote,max_length=32,model=lm,"
                       "batch_size=16",
            tasks=["zoo_choice"], task_manager=TaskManager(include_path=str(tmp_path)), log_samples=True,
        )
    finally:
        server.stop()
    correct = []
    for sample in results["samples"]["zoo_choice"]:
        question = QUESTIONS[sample["doc_id"]]
        scores = zoo.score(model, [question["question"]] * len(question["choices"]),
                           [" " + choice for choice in question["choices"]])
        harness = [resp[0][0] for resp in sample["resps"]]
        np.testing.assert_allclose(harness, [s.logprob for s in scores], rtol=1e-4)
        correct.append(int(np.argmax([s.logprob for s in scores])) == question["label"])
    assert len(correct) == len(QUESTIONS)
    assert results["results"]["zoo_choice"]["acc,none"] == pytest.approx(np.mean(correct))
    assert 0 < np.mean(correct) < 1  # the check tells a right choice from a wrong one


@pytest.mark.integration  # half a minute of the harness's requests
def test_the_harness_local_completions_model_scores_rolling_windows_as_zoo_score(tmp_path):
    """The rolling-perplexity task through `local-completions` at
    `max_length` the model's context: the harness keeps one token for
    generation, so each of its windows is a prompt of the context less one
    token (`echo`, `logprobs: 1`, `max_tokens: 1`) scoring the context less
    two; every window is answered, and the word perplexity is `zoo.score`'s
    over the harness's own windows. A text inside one window gets
    `zoo.score_rolling`'s log-likelihood."""
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("tenacity")
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    from tests.recipes.test_evaluate import ROLLING_TASK, TEXTS

    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in TEXTS), encoding="utf-8")
    (tmp_path / "text.yaml").write_text(ROLLING_TASK.format(data=data), encoding="utf-8")
    model = evaluated_model()
    prefix = 0  # a character tokenizer has no start or end token for the harness to predict the first from
    server = Server(model)
    try:
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=f"base_url={server.url}/v1/completions,tokenizer_backend=remote,max_length={CONTEXT},model=lm,"
                       f"batch_size=16,custom_prefix_token_id={prefix},max_retries=1",
            tasks=["zoo_text"], task_manager=TaskManager(include_path=str(tmp_path)), log_samples=True,
        )
    finally:
        server.stop()
    texts = [row["text"] for row in TEXTS]
    totals, windows = [], []
    for text in texts:
        pairs = [make_disjoint_window(pair) for pair in get_rolling_token_windows(
            ids_of(model, text), prefix_token=prefix, max_seq_len=CONTEXT - 2, context_len=1)]
        assert max(len(context + continuation) for context, continuation in pairs) == min(len(text) + 1, CONTEXT - 1)
        totals.append(sum(s.logprob for s in zoo.score(model, [c for c, _ in pairs], [t for _, t in pairs])))
        windows.append(len(pairs))
    assert windows == [3, 1, 3]  # the long texts take several windows
    harness = {sample["doc_id"]: sample["resps"][0][0] for sample in results["samples"]["zoo_text"]}
    np.testing.assert_allclose([harness[i] for i in range(len(texts))], totals, rtol=1e-5)
    words = sum(len(text.split()) for text in texts)
    assert results["results"]["zoo_text"]["word_perplexity,none"] == pytest.approx(math.exp(-sum(totals) / words),
                                                                                  rel=1e-5)
    short = zoo.score_rolling(model, [texts[1]], prefix_token_id=prefix)[0]
    assert short.window_count == 1 and harness[1] == pytest.approx(short.logprob, rel=1e-5)


def evaluated_model():
    """The model of tests/recipes/test_evaluate.py: a context of 32 characters."""
    import keras

    from tests.recipes.test_evaluate import QUESTIONS, TEXTS
    from zoo.tokenizers import CharTokenizer

    everything = " ".join(q["question"] + " " + " ".join(q["choices"]) for q in QUESTIONS) + " ".join(
        t["text"] for t in TEXTS)
    tokenizer = CharTokenizer.from_text(everything)
    keras.utils.set_random_seed(0)
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(),
                     max_sequence_length=CONTEXT, initializer_range=0.5, tokenizer=tokenizer)


# --- n, best_of, chat ---------------------------------------------------------------------------


def test_n_samples_of_a_prompt_are_choices_each_scored_as_its_own_text(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=8, temperature=2.0, n=4,
                                                logprobs=0)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert answer.usage.completion_tokens == 4 * 8
    for choice in answer.choices:
        score = zoo.score(lm, [ids_of(lm, PROMPT)], [ids_of(lm, choice.text)])[0]
        np.testing.assert_allclose(choice.logprobs.token_logprobs, score.token_logprobs, rtol=1e-5)
    assert len({c.text for c in answer.choices}) > 1  # four draws, not one answer four times


def test_greedy_n_answers_zoo_generate_n_times(served, lm):
    answer = served.client().completions.create(model="lm", prompt=[PROMPT, "JULIET: "], max_tokens=5,
                                                temperature=0, n=2)
    texts = [c.text for c in answer.choices]
    first, second = (zoo.generate(lm, p, max_new_tokens=5)[len(p):] for p in (PROMPT, "JULIET: "))
    assert texts == [first, first, second, second]  # OpenAI's order: each prompt's n choices together


def test_best_of_decodes_every_sample_and_returns_the_likeliest_per_token(served, lm):
    answer = served.client().completions.create(model="lm", prompt=PROMPT, max_tokens=6, temperature=2.0, n=2,
                                                best_of=6, logprobs=0)
    assert len(answer.choices) == 2 and answer.usage.completion_tokens == 6 * 6
    means = [np.mean(c.logprobs.token_logprobs) for c in answer.choices]
    assert means == sorted(means, reverse=True)


def test_chat_logprobs_are_openais_chat_shape_and_zoo_scores(chat_folder):
    lm = zoo.from_pretrained(chat_folder)
    messages = [{"role": "user", "content": "naïve café?"}]
    ids = lm.tokenizer.apply_chat_template(messages)
    server = Server(lm, name="qwen")
    try:
        answer = server.client().chat.completions.create(model="qwen", messages=messages, max_tokens=6,
                                                         temperature=0, logprobs=True, top_logprobs=3)
    finally:
        server.stop()
    new = zoo.generate(lm, [ids], 6, stop_token_ids=lm.tokenizer.end_token_ids).sequences[0]
    if new and new[-1] in lm.tokenizer.end_token_ids:
        new = new[:-1]
    score = zoo.score(lm, [ids], [list(new)], top_logprobs=3)[0]
    content = answer.choices[0].logprobs.content
    np.testing.assert_allclose([c.logprob for c in content], score.token_logprobs, rtol=1e-5)
    for entry, top_ids in zip(content, score.top_ids):
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert [t.token for t in entry.top_logprobs] == [lm.tokenizer.detokenize([int(t)]) for t in top_ids]
        assert entry.top_logprobs[0].logprob == max(t.logprob for t in entry.top_logprobs)


def test_chat_n_returns_n_answers_each_the_models(chat_folder):
    """Chat's `n` through the `openai` client: greedy, each choice is
    `zoo.generate`'s answer; sampled, n different answers, each of its own
    tokens with their log-probabilities, counted in `usage`."""
    lm = zoo.from_pretrained(chat_folder)
    messages = [{"role": "user", "content": "naïve café?"}]
    ids = lm.tokenizer.apply_chat_template(messages)
    new = zoo.generate(lm, [ids], 6, stop_token_ids=lm.tokenizer.end_token_ids).sequences[0]
    greedy = lm.tokenizer.detokenize([t for t in new if t not in lm.tokenizer.end_token_ids])
    server = Server(lm, name="qwen")
    try:
        client = server.client()
        answer = client.chat.completions.create(model="qwen", messages=messages, max_tokens=6, temperature=0, n=2)
        sampled = client.chat.completions.create(model="qwen", messages=messages, max_tokens=6, temperature=2.0, n=3,
                                                 logprobs=True)
    finally:
        server.stop()
    assert [c.index for c in answer.choices] == [0, 1]
    assert [c.message.content for c in answer.choices] == [greedy, greedy]
    assert [c.index for c in sampled.choices] == [0, 1, 2]
    tokens = 0
    for choice in sampled.choices:
        content = choice.logprobs.content
        assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
        assert 1 <= len(content) <= 6 and all(-math.inf < entry.logprob <= 0 for entry in content)
        assert (choice.finish_reason == "length") == (len(content) == 6)
        tokens += len(content) + (choice.finish_reason == "stop")  # an end token is counted, not shown
    assert sampled.usage.completion_tokens == tokens and sampled.usage.prompt_tokens == len(ids)
    assert len({c.message.content for c in sampled.choices}) > 1  # three draws, not one answer three times


@pytest.mark.parametrize("body, param", [
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "stream": True}, "stream"),
    ({"logprobs": 3}, "logprobs"),
    ({"n": 9}, "n"),
])
def test_bad_chat_logprobs_and_n_are_refused(served, body, param):
    body = {"model": "lm", "messages": [{"role": "user", "content": "hi"}], **body}
    response = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == param
