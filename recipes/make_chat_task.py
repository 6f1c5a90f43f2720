"""Write a synthetic chat instruction task: train, validation and test conversations.

    python -m recipes.make_chat_task --out runs/reverse_task
    python -m recipes.make_chat_task --out runs/sort_task --task sort --train 8000

The user gives a list of short words, "Reverse: cat moon fig", and the
assistant answers them reordered, "fig moon cat" (`--task sort`:
alphabetically). The conversations are `zoo.data.word_order_chat`'s, in the
OpenAI `messages` shape, one a line: `train.jsonl`, `validation.jsonl` and
`test.jsonl` in --out, what `zoo train sft --data ... --validation ...`
reads. Every prompt is a distinct sequence of words drawn with --seed, so no
validation or test prompt occurs in training; the script checks it and says
so. A prompt and its answer in ChatML fit a 64-character context (gpt_char's
model): a round trip of the whole loop is in docs/fine-tuning.md, "A chat
task from scratch".
"""

import argparse
import json
import sys
from pathlib import Path

# --- Defaults: 4,000 conversations to train on, 200 to validate and 200 to test.
DEFAULTS = dict(task="reverse", train=4000, validation=200, test=200, num_words=3, seed=0)


def make_parser():
    from recipes.flags import Number

    parser = argparse.ArgumentParser(prog="python -m recipes.make_chat_task", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder of train.jsonl, validation.jsonl and test.jsonl")
    parser.add_argument("--task", choices=("reverse", "sort"), default=DEFAULTS["task"],
                        help="what the assistant does to the words")
    for split in ("train", "validation", "test"):
        parser.add_argument(f"--{split}", type=Number(int, minimum=1), default=DEFAULTS[split],
                            help=f"conversations in {split}.jsonl")
    parser.add_argument("--num-words", type=Number(int, minimum=2), default=DEFAULTS["num_words"],
                        help="words in a prompt")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    return parser


def prompts(conversations):
    """The user turns of conversations, as a set of str."""
    return {m["content"] for c in conversations for m in c["messages"] if m["role"] == "user"}


def write_task(out, task=DEFAULTS["task"], train=DEFAULTS["train"], validation=DEFAULTS["validation"],
               test=DEFAULTS["test"], num_words=DEFAULTS["num_words"], seed=DEFAULTS["seed"]):
    """Writes out/train.jsonl, validation.jsonl and test.jsonl.

    Returns:
        A dict of split name to its path.

    Raises:
        ValueError: more conversations than the words allow, or two splits
            sharing a prompt.
    """
    from zoo.data import word_order_chat

    splits = word_order_chat({"train": train, "validation": validation, "test": test}, task, num_words, seed=seed)
    seen = prompts(splits["train"])
    for name in ("validation", "test"):
        shared = seen & prompts(splits[name])
        if shared:
            raise ValueError(f"{name}: {len(shared)} prompts also in train, e.g. {sorted(shared)[0]!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, conversations in splits.items():
        paths[name] = out / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(c) + "\n" for c in conversations), encoding="utf-8")
    return paths


def main(argv=None):
    args = make_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        paths = write_task(args.out, args.task, args.train, args.validation, args.test, args.num_words, args.seed)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    example = json.loads(paths["test"].read_text(encoding="utf-8").split("\n")[0])["messages"]
    print(f"{args.task}: {args.train} train, {args.validation} validation, {args.test} test conversations in "
          f"{args.out}; no validation or test prompt is in train")
    print(f"e.g. user: {example[0]['content']!r} -> assistant: {example[1]['content']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
