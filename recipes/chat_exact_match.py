"""The exact match of a served model's chat answers to a chat file's answers.

    python -m recipes.chat_exact_match runs/reverse_sft --data runs/reverse_task/test.jsonl
    python -m recipes.chat_exact_match --url http://127.0.0.1:8000/v1 --data test.jsonl

Each conversation of --data (JSON Lines, the OpenAI `messages` shape) is
asked without its last assistant turn through `zoo serve`'s
`/v1/chat/completions`, with the official `openai` client, greedily
(temperature 0), and its answer counts when it equals that turn (both
stripped of surrounding whitespace). A TARGET (a run folder, a `.keras`
file or a checkpoint) is served by a `zoo serve TARGET --port 0` process
started on 127.0.0.1 for the run and stopped after it; --url asks a server
already running. `--chat-template chatml` serves TARGET as `zoo train sft`
starts from a model without a template: a character model's tokenizer
given ChatML's markers (`recipes.lm_data.with_special_tokens`) and ChatML,
the figure before fine-tuning. Needs the `serve` extra (`openai` among it). Prints a few
answers, then, last, `exact_match=...`.
"""

import argparse
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# --- Defaults: as many requests at once as zoo serve decodes together.
DEFAULTS = dict(max_tokens=None, concurrency=8, show=3, start_timeout=300)  # max_tokens None: the context's room


def make_parser():
    from recipes.flags import POSITIVE_INT

    parser = argparse.ArgumentParser(prog="python -m recipes.chat_exact_match", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="a model to serve: a run folder, a .keras file or a checkpoint")
    parser.add_argument("--url", help="a zoo serve already running, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--data", required=True, help="JSON Lines conversations, each ending with the answer")
    parser.add_argument("--max-tokens", type=POSITIVE_INT, default=DEFAULTS["max_tokens"],
                        help="the most tokens of an answer (default: what the context has left after the prompt)")
    parser.add_argument("--concurrency", type=POSITIVE_INT, default=DEFAULTS["concurrency"],
                        help="requests in flight at once")
    parser.add_argument("--show", type=int, default=DEFAULTS["show"], help="answers printed")
    parser.add_argument("--chat-template", choices=("chatml",),
                        help="serve TARGET with ChatML's markers and template, as sft starts from it")
    return parser


def questions(conversations):
    """(messages asked, the answer expected) of each conversation: all its
    turns before the last assistant turn, and that turn's text."""
    pairs = []
    for messages in conversations:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        pairs.append((messages[:last], messages[last]["content"]))
    return pairs


def ask(url, pairs, max_tokens=DEFAULTS["max_tokens"], concurrency=DEFAULTS["concurrency"]):
    """The served model's greedy answers to `pairs`' messages, a list of str."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    model = client.models.list().data[0].id

    def one(messages):
        limit = {} if max_tokens is None else {"max_tokens": max_tokens}
        reply = client.chat.completions.create(model=model, messages=messages, temperature=0, **limit)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, [messages for messages, _ in pairs]))


def exact_match(answers, pairs):
    """The share of answers equal to the expected ones, stripped."""
    return sum(a.strip() == expected.strip() for a, (_, expected) in zip(answers, pairs, strict=True)) / len(pairs)


class Server:
    """`zoo serve TARGET --port 0` as a process on 127.0.0.1, until `stop()`;
    `url` is the address it printed."""

    def __init__(self, target, timeout=DEFAULTS["start_timeout"]):
        import time

        self.process = subprocess.Popen([sys.executable, "-m", "recipes.cli", "serve", str(target), "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url, lines, deadline = None, [], time.monotonic() + timeout
        for line in self.process.stdout:
            lines.append(line)
            if line.startswith("zoo serve: http://"):
                self.url = line.split()[2]
                break
            if time.monotonic() > deadline:
                break
        if self.url is None:
            self.stop()
            raise RuntimeError(f"zoo serve {target} did not start:\n{''.join(lines[-20:])}")
        # Read what it prints from now on, so that a full pipe never blocks it.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def with_chatml(target, folder):
    """`target`'s model as `zoo train sft` starts from it when it has no
    chat template: ChatML's markers added to a character tokenizer, ChatML
    its template; saved as folder/model.keras, whose path is returned."""
    from zoo.tokenizers import CHATML, CHATML_TOKENS

    from recipes.lm_data import pretrained_model, with_special_tokens

    model = pretrained_model(str(target))
    if hasattr(model.tokenizer, "with_special_tokens"):
        model = with_special_tokens(model, CHATML_TOKENS)
    if model.tokenizer.chat_template is None:
        model.tokenizer.chat_template = CHATML
    path = Path(folder) / "model.keras"
    model.save(path)
    return path


def score(data, target=None, url=None, max_tokens=DEFAULTS["max_tokens"], concurrency=DEFAULTS["concurrency"]):
    """The exact match of the answers to `data`'s conversations, asked of
    `target` served for the call, or of the server at `url`.

    Returns:
        `(exact_match, answers, pairs)`: a float in [0, 1], the answers (a
        list of str) and `questions(...)`'s pairs.
    """
    from zoo.data import read_chat

    pairs = questions(read_chat(data))
    server = None if url is not None else Server(target)
    try:
        answers = ask(url or server.url, pairs, max_tokens, concurrency)
    finally:
        if server is not None:
            server.stop()
    return exact_match(answers, pairs), answers, pairs


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if (args.target is None) == (args.url is None):
        parser.error("expected a TARGET to serve or --url of a running server (one of them)")
    from zoo.data import DataError

    if args.chat_template and args.target is None:
        parser.error("--chat-template: expected a TARGET to serve with it")
    try:
        with tempfile.TemporaryDirectory() as folder:
            target = with_chatml(args.target, folder) if args.chat_template else args.target
            figure, answers, pairs = score(args.data, target, args.url, args.max_tokens, args.concurrency)
    except (DataError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for answer, (messages, expected) in list(zip(answers, pairs))[:args.show]:
        print(f"{messages[-1]['content']!r} -> {answer!r} (expected {expected!r})")
    print(f"{round(figure * len(pairs))} of {len(pairs)} answers exact")
    print(f"exact_match={figure:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
