"""`zoo evaluate` runs the lm-evaluation-harness offline on task files
written here (a multiple-choice task, a rolling-perplexity task): the
harness's accuracy is the choice `zoo.score` ranks first, its perplexities
are `zoo.score_rolling`'s sums over the words and bytes; `--output` writes
the harness's JSON, the table is printed; a bad task, folder or model gets
one line and exit status 2."""

import json
import math
import os
import tempfile
import types

# The harness reads the task files' JSONL through `datasets`, which reads these when it is imported.
os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="zoo-datasets-"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("lm_eval")

import zoo  # noqa: E402
from recipes import cli  # noqa: E402
from recipes.evaluate import ZooLM  # noqa: E402
from zoo.tokenizers import CharTokenizer  # noqa: E402

QUESTIONS = [
    {"question": "the cat sat on the", "choices": ["mat", "hat", "sea"], "label": 0},
    {"question": "a dog ran to the", "choices": ["park", "moon"], "label": 0},
    {"question": "two birds flew over", "choices": ["a tree", "the sea", "it"], "label": 1},
    {"question": "the sun rose over", "choices": ["the hills", "a cup"], "label": 0},
    {"question": "she read a", "choices": ["book", "rock", "tree", "sun"], "label": 2},
]
TEXTS = [
    {"text": "the cat sat on the mat and the dog ran to the park while two birds flew over the sea."},
    {"text": "she read a book."},
    {"text": "the sun rose over the hills, a cup of tea on the table, and the day began slowly."},
]
CHOICE_TASK = """task: zoo_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: choices
doc_to_target: label
metric_list:
  - metric: acc
"""
ROLLING_TASK = """task: zoo_text
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluate")
    tasks = folder / "tasks"
    tasks.mkdir()
    for name, rows, template in (("choice", QUESTIONS, CHOICE_TASK), ("text", TEXTS, ROLLING_TASK)):
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        (tasks / f"{name}.yaml").write_text(template.format(data=data), encoding="utf-8")
    everything = " ".join(q["question"] + " " + " ".join(q["choices"]) for q in QUESTIONS) + " ".join(t["text"] for t in TEXTS)
    tokenizer = CharTokenizer.from_text(everything)
    keras.utils.set_random_seed(0)
    # A context of 32 characters: the longer texts take several windows; large weights: the choices' scores differ.
    model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=32,
                      initializer_range=0.5, tokenizer=tokenizer)
    path = folder / "model.keras"
    zoo.save(model, path)
    return types.SimpleNamespace(folder=folder, tasks=tasks, model_path=path, model=zoo.load(path, compile=False))


def test_multiple_choice_accuracy_is_the_choice_zoo_score_ranks_first(files, capsys):
    output = files.folder / "choice.json"
    assert cli.main(["evaluate", str(files.model_path), "--tasks", "zoo_choice", "--include-path", str(files.tasks),
                     "--output", str(output), "--batch-size", "3"]) == 0
    results = json.loads(output.read_text(encoding="utf-8"))
    accuracy = results["results"]["zoo_choice"]["acc,none"]
    correct = []
    for question in QUESTIONS:
        # The harness's request: the question, then " " + each choice (its target_delimiter).
        scores = zoo.score(files.model, [question["question"]] * len(question["choices"]),
                           [" " + choice for choice in question["choices"]])
        correct.append(int(np.argmax([s.logprob for s in scores])) == question["label"])
    assert accuracy == pytest.approx(np.mean(correct))
    assert 0 < np.mean(correct) < 1  # the check tells a right choice from a wrong one
    table = capsys.readouterr().out
    assert "zoo_choice" in table and "acc" in table and "|" in table


def test_limit_and_num_fewshot_reach_the_harness(files, monkeypatch):
    """`--limit 3` scores the first three documents only, `--num-fewshot 1`
    puts one other answered question before each; the accuracy is the
    choice `zoo.score` ranks first on those very requests."""
    asked = []
    loglikelihood = ZooLM.loglikelihood

    def recorded(self, requests, disable_tqdm=False):
        asked.extend(request.args for request in requests)
        return loglikelihood(self, requests, disable_tqdm)

    monkeypatch.setattr(ZooLM, "loglikelihood", recorded)
    # The choice task with ". " between examples: the harness's "\n\n" is not among the model's characters.
    tasks = files.folder / "shots"
    tasks.mkdir(exist_ok=True)
    task = (files.tasks / "choice.yaml").read_text(encoding="utf-8").replace("task: zoo_choice", "task: zoo_shots")
    (tasks / "shots.yaml").write_text(task + 'fewshot_delimiter: ". "\n', encoding="utf-8")
    output = files.folder / "fewshot.json"
    assert cli.main(["evaluate", str(files.model_path), "--tasks", "zoo_shots", "--include-path", str(tasks),
                     "--limit", "3", "--num-fewshot", "1", "--output", str(output)]) == 0
    results = json.loads(output.read_text(encoding="utf-8"))
    assert results["n-samples"]["zoo_shots"]["effective"] == 3
    contexts = {}
    for context, continuation in asked:
        contexts.setdefault(context, []).append(continuation)
    assert len(contexts) == 3 and len(asked) == sum(len(q["choices"]) for q in QUESTIONS[:3])
    correct = []
    for question, (context, continuations) in zip(QUESTIONS[:3], sorted(contexts.items(), key=lambda item: min(
            i for i, q in enumerate(QUESTIONS) if item[0].endswith(q["question"])))):
        shot, _, own = context.rpartition(". ")
        assert own == question["question"] and continuations == [" " + c for c in question["choices"]]
        assert shot in [q["question"] + " " + q["choices"][q["label"]] for q in QUESTIONS if q is not question]
        scores = zoo.score(files.model, [context] * len(continuations), continuations)
        correct.append(int(np.argmax([s.logprob for s in scores])) == question["label"])
    assert results["results"]["zoo_shots"]["acc,none"] == pytest.approx(np.mean(correct))


def test_rolling_perplexity_is_zoo_score_rolling_over_words_and_bytes(files):
    output = files.folder / "text.json"
    assert cli.main(["evaluate", str(files.model_path), "--tasks", "zoo_text", "--include-path", str(files.tasks),
                     "--output", str(output)]) == 0
    metrics = json.loads(output.read_text(encoding="utf-8"))["results"]["zoo_text"]
    texts = [t["text"] for t in TEXTS]
    rolling = zoo.score_rolling(files.model, texts)
    assert [r.window_count for r in rolling] == [3, 1, 3]
    total = sum(r.logprob for r in rolling)
    words = sum(len(t.split()) for t in texts)
    size = sum(len(t.encode("utf-8")) for t in texts)
    assert metrics["word_perplexity,none"] == pytest.approx(math.exp(-total / words), rel=1e-6)
    assert metrics["byte_perplexity,none"] == pytest.approx(math.exp(-total / size), rel=1e-6)
    assert metrics["bits_per_byte,none"] == pytest.approx(-total / size / math.log(2), rel=1e-6)


def test_generate_until_is_greedy_generation_cut_at_the_stop_string(files):
    lm = ZooLM(files.model, batch_size=2)
    prompts = ["the cat sat", "she read a book and then", "a dog"]
    requests = [types.SimpleNamespace(args=(prompt, {"until": ["."], "max_gen_toks": budget}))
                for prompt, budget in zip(prompts, [5, 12, 8])]
    outputs = lm.generate_until(requests)
    for prompt, budget, output in zip(prompts, [5, 12, 8], outputs):
        expected = zoo.generate(files.model, prompt, max_new_tokens=budget)[len(prompt):].split(".")[0]
        assert output == expected


def test_generate_until_batches_requests_of_any_sampling_each_as_it_would_go_alone(files):
    lm = ZooLM(files.model, batch_size=4)
    settings = [
        {"until": ["."], "max_gen_toks": 6},
        {"until": ["\n"], "max_gen_toks": 8, "do_sample": True, "temperature": 0.7},
        {"until": ["."], "max_gen_toks": 7, "do_sample": True, "top_p": 0.8},
        {"until": ["."], "max_gen_toks": 5, "temperature": 1.3, "top_k": 3},
    ]
    prompts = ["the cat sat", "she read a book and then", "a dog", "the cat"]
    together = lm.generate_until([types.SimpleNamespace(args=(p, s)) for p, s in zip(prompts, settings)])
    alone = [ZooLM(files.model, batch_size=1).generate_until([types.SimpleNamespace(args=(p, s))])[0]
             for p, s in zip(prompts, settings)]
    assert together == alone
    # A sampled request draws with the harness's seed, as zoo.generate does with it.
    sampled = zoo.generate(files.model, prompts[1], max_new_tokens=8, sampler="temperature", temperature=0.7,
                           seed=1234)[len(prompts[1]):]
    assert together[1] == sampled.split("\n")[0]


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "no_such_task"], "unknown task no_such_task; expected a task or group of the harness"),
    (["--tasks", "zoo_choice", "--include-path", "/nowhere"], "--include-path /nowhere: no such folder"),
    (["--tasks", " , "], "names no task"),
])
def test_bad_tasks_get_one_line_before_the_model_loads(files, capsys, argv, message):
    if "--include-path" not in argv and argv[1] != " , ":
        argv = argv + ["--include-path", str(files.tasks)]
    assert cli.main(["evaluate", str(files.folder / "missing.keras")] + argv) == 2  # the model is never opened
    error = capsys.readouterr().err.strip()
    assert error.startswith("zoo evaluate: error:") and message in error and "\n" not in error


def test_a_model_that_is_not_a_language_model_is_refused(files, capsys):
    path = files.folder / "bert.keras"
    zoo.save(zoo.build("bert-tiny", "classifier", vocabulary_size=30), path)
    assert cli.main(["evaluate", str(path), "--tasks", "zoo_choice", "--include-path", str(files.tasks)]) == 2
    error = capsys.readouterr().err.strip()
    assert "holds a BertClassifier, not a language model; expected a causal LM" in error


def test_zoo_eval_points_to_the_harness(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    assert "zoo evaluate" in capsys.readouterr().out
