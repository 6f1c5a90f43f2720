"""Fine-tune a pretrained causal LM on conversations: chat and instruction tuning (SFT).

    python -m recipes.sft --data chat.jsonl                    # SmolLM2-135M-Instruct (hf://HuggingFaceTB/...)
    python -m recipes.sft --pretrained Qwen2.5-0.5B --data train.jsonl --validation val.jsonl --lora 8
    python -m recipes.sft --pretrained runs/base --data a.jsonl,b.jsonl --chat-template chatml
    python -m recipes.sft --pretrained runs/gpt_char --data train.jsonl --sequence-length 64   # trained from scratch

--data is one or more JSON Lines files (comma-separated, or the flag
repeated), one conversation a line in the OpenAI / Hugging Face shape,
`{"messages": [{"role": "system" | "user" | "assistant", "content": ...},
...]}`, or an instruction pair `{"prompt": ..., "completion": ...}`. No
chat data set is registered by name. --pretrained is loaded as
gpt_finetune loads it (a Hugging Face or keras-hub checkpoint folder, a
handle `hf://ORG/NAME[@REVISION]`, a run folder or a `.keras` file), and
carries a Hugging Face tokenizer.json (Llama, Mistral, Qwen, SmolLM2,
Gemma 3) or is a model the zoo trained from scratch with a CharTokenizer
(a gpt_char run): that tokenizer renders and keeps the chat template. A
checkpoint without a template takes --chat-template FILE (a Jinja
template, as tokenizer_config.json's `chat_template`), or `--chat-template
chatml`; the saved model carries it. ChatML is the default of a model
trained from scratch: its character tokenizer gets `<|im_start|>` and
`<|im_end|>` as two special tokens after its characters, and the model a
row for each in its embedding (`recipes.lm_data.with_special_tokens`);
`<|im_end|>` then ends each answer, where `zoo serve` stops.

Each conversation is rendered by the template through the renderer `zoo
serve` uses and tokenized as serving does (`zoo.data.chat_examples`); the
loss (masked mean cross-entropy) counts only the assistant turns' tokens
with their end tokens, or every token with --train-on-prompt. A
conversation is one row of a batch, padded on the right, so no token
attends to another conversation's; the rows are grouped into batches by
length (buckets) to spare the padding. A conversation longer than
--sequence-length tokens is cut to it, and the run prints how many were.
The validation conversations are --validation FILE, or a --validation-fraction
of --data drawn with --seed. Training is gpt_finetune's: AdamW, a linear
warm-up then cosine decay to a tenth of the peak, --lora RANK for LoRA,
and the memory levers --lora-targets, --quantize (QLoRA), --accumulate and
--remat (docs/fine-tuning.md, "Memory levers"). The validation loss (nats per answer token) is printed before and after,
and the model answers --prompt.

Writes to --output: `model.keras` (the fine-tuned causal LM, its tokenizer
and chat template inside: `zoo serve RUN` chats with it, `zoo sample RUN
"text"` continues text, `zoo export RUN DIR --format huggingface` writes a
checkpoint folder), `history.csv`, `curves.png`, `logs/`, `samples.txt` and
`run.json`. The last two lines are `run folder: RUN` and `val_loss=...`.
"""

import sys
from pathlib import Path

from recipes import lm_data
from recipes.errors import run_recipe
from recipes.lm_data import add_language_model_flags, save_sample
from recipes.recipe import run

# --- Defaults: a short chat fine-tuning run of SmolLM2-135M-Instruct on one CPU or GPU.
DEFAULTS = dict(
    data=None,  # JSON Lines chat files (required)
    preset=None,  # the model is --pretrained's
    pretrained="hf://HuggingFaceTB/SmolLM2-135M-Instruct",  # ChatML template, downloaded once
    chat_template=None,  # the checkpoint's own
    validation=None,  # a chat file; None holds out --validation-fraction of --data
    validation_fraction=0.1,
    lora=0,  # LoRA rank; 0 fine-tunes every weight
    steps=300,
    batch_size=8,
    sequence_length=None,  # tokens of a conversation (longer ones are cut); None: min(512, the context)
    learning_rate=2e-5,  # peak
    min_learning_rate_fraction=0.1,
    warmup_steps=30,
    weight_decay=0.01,
    beta_2=0.99,
    clipnorm=1.0,
    steps_per_epoch=50,  # one point of the learning curves
    epoch_eval_batches=8,  # validation batches per epoch, for the curves
    eval_batches=40,  # the most validation batches of the final estimate
    prompt="What is a transformer, in one sentence?",
    sample_length=100,  # new tokens of the answer
    jit_compile="auto",
    output="runs/sft",
    seed=1337,
)
LONGEST_DEFAULT = 512  # the --sequence-length of a checkpoint whose context is longer
CHATML_NAME = "chatml"  # --chat-template chatml: zoo.tokenizers.CHATML


def make_parser():
    """The recipe's flags (`zoo train sft -h`)."""
    from recipes.flags import Number, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train sft")
    parser.add_argument("--pretrained", default=DEFAULTS["pretrained"],
                        help="a causal-LM checkpoint with a tokenizer.json: a folder (Hugging Face or keras-hub), "
                        "a handle (hf://ORG/NAME[@REVISION]) or a run folder")
    parser.add_argument("--chat-template", default=DEFAULTS["chat_template"], metavar="FILE",
                        help="a Jinja chat template for a checkpoint without one ('chatml': ChatML, the template "
                        "for a model trained from scratch); default: the checkpoint's own")
    parser.add_argument("--train-on-prompt", action="store_true",
                        help="the loss counts every token, not only the assistant turns'")
    parser.add_argument("--validation", default=DEFAULTS["validation"], metavar="FILE",
                        help="JSON Lines validation conversations; default: --validation-fraction of --data")
    parser.add_argument("--validation-fraction", type=Number(float, above=0, below=1),
                        default=DEFAULTS["validation_fraction"], help="the share of --data held out to validate")
    parser.add_argument("--sequence-length", type=Number(int, minimum=2), default=DEFAULTS["sequence_length"],
                        help="the most tokens of a conversation; longer ones are cut (and counted); default: "
                        f"{LONGEST_DEFAULT} or the checkpoint's context, whichever is shorter")
    add_language_model_flags(parser, DEFAULTS, "new tokens")
    lm_data.add_fine_tuning_flags(parser, DEFAULTS)
    parser.add_argument("--prompt", default=DEFAULTS["prompt"], help="the user message the sample answers")
    return parser


def data_files(argv):
    """argv with the values of a repeated --data joined into one, comma-separated."""
    argv, files, out, i = list(argv), [], [], 0
    while i < len(argv):
        if argv[i] == "--data" and i + 1 < len(argv):
            files.append(argv[i + 1])
            i += 2
            continue
        if argv[i].startswith("--data="):
            files.append(argv[i][len("--data="):])
        else:
            out.append(argv[i])
        i += 1
    return out + (["--data", ",".join(files)] if files else [])


def parse(argv):
    """The flags, checked against what the checkpoint fixes."""
    parser = make_parser()
    args = parser.parse_args(data_files(sys.argv[1:] if argv is None else argv))
    if not args.data:
        parser.error("--data: expected JSON Lines chat files, one conversation a line (no chat data set is "
                     "registered by name)")
    lm_data.check_pretrained_flags(parser, args, "sft")
    return args


def read_template(args):
    """The chat template the run renders with: --chat-template's, or the
    checkpoint's own read from its tokenizer files without building the
    model, or None where only the model holds it (a run folder, a keras-hub
    preset); a DataError when neither has one."""
    import zoo
    from zoo.data import DataError
    from zoo.tokenizers import CHATML, HuggingFaceTokenizer

    if args.chat_template == CHATML_NAME:
        return CHATML
    if args.chat_template is not None:
        path = Path(args.chat_template)
        if not path.is_file() or not path.read_text(encoding="utf-8").strip():
            reason = "is empty" if path.is_file() else "does not exist"
            raise DataError(f"--chat-template {path}: {reason}; expected a Jinja chat template file, or 'chatml'")
        return path.read_text(encoding="utf-8")
    folder = args.pretrained
    if zoo.checkpoints.is_handle(folder):
        folder = zoo.checkpoints.checkpoint_folder(folder)
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
        return None
    if zoo.checkpoints.checkpoint_format(folder) != "huggingface":
        return None
    template = HuggingFaceTokenizer.from_folder(folder).chat_template
    if template is None:
        raise no_template(args)
    return template


def no_template(args):
    from zoo.data import DataError

    return DataError(
        f"{args.data.split(',')[0]}: chat data needs a chat template, and {args.pretrained} has none "
        "(tokenizer_config.json's `chat_template` or chat_template.jinja); expected --chat-template FILE, "
        f"or --chat-template {CHATML_NAME} for a model trained from scratch"
    )


def split_conversations(args):
    """(training, validation) conversations: --validation's, or a seeded
    --validation-fraction of --data; a DataError when either is too few."""
    import numpy as np

    from zoo.data import DataError, read_chat

    conversations = read_chat(args.data)
    if args.validation is not None:
        train, val = conversations, read_chat(args.validation)
    else:
        order = np.random.default_rng(args.seed).permutation(len(conversations))
        held = int(round(args.validation_fraction * len(conversations)))
        val, train = [conversations[i] for i in order[:held]], [conversations[i] for i in order[held:]]
        if not val:
            raise DataError(f"{args.data}: {len(conversations)} conversations, none left to validate with "
                            f"--validation-fraction {args.validation_fraction}; expected more conversations, a "
                            "larger fraction or --validation FILE")
    if len(train) < args.batch_size:
        raise DataError(f"{args.data}: {len(train)} training conversations; expected at least --batch-size "
                        f"{args.batch_size}")
    return train, val


def read_data(args):
    """The conversations (checked, before any model is built), then the
    checkpoint (`lm_data.load_checkpoint`, as gpt_finetune loads it) with the template on its
    tokenizer, and the examples: a dict of model, train and val
    (`zoo.data.ChatExamples`)."""
    import numpy as np

    from zoo.data import DataError, chat_examples
    from zoo.tokenizers import CHATML, CHATML_TOKENS, CharTokenizer

    from recipes.lm_data import load_checkpoint

    train, val = split_conversations(args)
    template = read_template(args)
    # A model trained from scratch gets ChatML's markers as tokens of its own.
    model, parameters = load_checkpoint(args, make_parser(), special_tokens=CHATML_TOKENS,
                                        default_sequence_length=LONGEST_DEFAULT)
    tokenizer = model.tokenizer
    if not hasattr(tokenizer, "tokenize_chat"):
        raise DataError(f"{args.pretrained}: its tokenizer is a {type(tokenizer).__name__}, which cannot carry a chat "
                        "template; expected a checkpoint with a Hugging Face tokenizer.json (Llama, Mistral, Qwen, "
                        "SmolLM2, Gemma 3) or a run of a recipe with a CharTokenizer (gpt_char)")
    if template is not None:
        tokenizer.chat_template = template  # saved with the model: zoo serve renders as the run trained
    elif isinstance(tokenizer, CharTokenizer) and tokenizer.chat_template is None:
        tokenizer.chat_template = CHATML  # the template of a model trained from scratch
    elif tokenizer.chat_template is None:
        raise no_template(args)
    examples = {name: chat_examples(model, part, args.sequence_length, args.train_on_prompt)
                for name, part in (("train", train), ("val", val))}
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    answer = int(examples["train"].loss_mask.sum())
    truncated = sum(e.truncated for e in examples.values())
    print(f"sft: {args.pretrained} ({parameters:,} parameters, {trainable:,} trained), {len(train):,} conversations "
          f"({answer:,} {'tokens' if args.train_on_prompt else 'answer tokens'}), {len(val):,} to validate",
          flush=True)
    print(f"{truncated} of {len(train) + len(val)} conversations truncated to {args.sequence_length} tokens", flush=True)
    return dict(model=model, truncated=truncated, **examples)


def open_folder(args, data):
    """The run folder (the tokenizer and template are inside model.keras)."""
    from recipes.run_folder import OutputFolder, run_config

    config = run_config("sft", args, args.pretrained)
    return OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)


def make_model(args, data):
    """The checkpoint compiled as gpt_finetune compiles it, the loss the
    mean cross-entropy over the tokens the loss mask marks."""
    from zoo.training import MaskedSparseCrossentropy

    from recipes.lm_data import compile_finetuning

    return compile_finetuning(data["model"], args, MaskedSparseCrossentropy(pad_id=None), DEFAULTS)


def next_token_arrays(examples, limit=None):
    """(named inputs, targets, weights) of the first `limit` examples: each
    token predicts the next; a target counts where the loss mask marks it.
    Cut to the longest of them."""
    n = slice(None, limit)
    width = max(int(examples.padding_mask[n].sum(axis=1).max()), 2)
    ids, padding, mask = (a[n, :width] for a in (examples.token_ids, examples.padding_mask, examples.loss_mask))
    return {"token_ids": ids[:, :-1], "padding_mask": padding[:, :-1]}, ids[:, 1:], mask[:, 1:].astype("float32")


def training_batches(examples, batch_size, seed):
    """Endless shuffled batches of (inputs, targets, weights), each of
    conversations of about the same length (buckets of 32, 64, 128, ...
    tokens), padded to its bucket's bound."""
    import tensorflow as tf

    from zoo.data import bucketed_batches

    inputs, targets, weights = next_token_arrays(examples)
    width = targets.shape[1]
    lengths = inputs["padding_mask"].sum(axis=1)
    bounds = [b for b in (2 ** k for k in range(5, 16)) if b < width] + [width]

    def pipeline(rows, bound):
        part = ({k: v[rows, :bound] for k, v in inputs.items()}, targets[rows, :bound], weights[rows, :bound])
        dataset = tf.data.Dataset.from_tensor_slices(part).shuffle(len(rows), seed=seed)
        return dataset.batch(batch_size, drop_remainder=True)

    batches, _ = bucketed_batches(pipeline, lengths, bounds, batch_size, seed=seed)
    return batches.repeat()


def fit(model, args, folder, data):
    """The validation loss before, then --steps steps; model.keras is the
    final model, with its tokenizer and template; curves.png."""
    import os
    import time

    import zoo

    from recipes.lm_data import mean_cross_entropy
    from recipes.plots import write_curves
    from recipes.run_folder import MODEL, callbacks

    final = final_validation(data["val"], args)
    before = mean_cross_entropy(model, *final[:2], args.batch_size, weights=final[2])
    print(f"val_loss before fine-tuning: {before:.4f}", flush=True)
    steps_per_epoch = min(args.steps_per_epoch, args.steps)
    start = time.perf_counter()
    model.fit(
        training_batches(data["train"], args.batch_size, args.seed).skip(folder.resumed_epoch * steps_per_epoch),
        steps_per_epoch=steps_per_epoch,
        epochs=-(-args.steps // steps_per_epoch),
        validation_data=next_token_arrays(data["val"], DEFAULTS["epoch_eval_batches"] * args.batch_size),
        validation_batch_size=args.batch_size,
        callbacks=callbacks(folder, save_best=False),
        shuffle=False,  # the batches are already shuffled
        verbose=2 if os.environ.get("CI") else 1,
    )
    seconds = time.perf_counter() - start
    zoo.save(model, folder / MODEL)
    print(f"fine-tuned {args.steps} steps in {seconds:.1f} s", flush=True)
    write_curves(folder, model, title=f"{Path(args.pretrained).name} fine-tuned on {Path(args.data).name}")
    return {"val_loss_before": before, "truncated": data["truncated"]}


def final_validation(examples, args):
    """The conversations of the final validation loss: the first
    --eval-batches batches of them."""
    return next_token_arrays(examples, args.eval_batches * args.batch_size)


def evaluate(folder, data=None, split="val", model=None):
    """The run's validation loss (mean cross-entropy per counted token,
    nats) on `split`, as the recipe printed it last.

    Args:
        folder: the run folder.
        data: JSON Lines chat files, every conversation of which is scored;
            None is the run's own `split`.
        split: "val" (the run's validation conversations: the first
            --eval-batches batches of them) or "train" (as many).
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `{"val_loss": float}` on the validation split, `{"<split>_loss": float}` on another.
    """
    from argparse import Namespace

    from zoo.data import DataError, chat_examples, read_chat

    from recipes.lm_data import mean_cross_entropy
    from recipes.run_folder import figure_name, load_model, read_run

    args = Namespace(**read_run(folder)["args"])
    if split not in ("train", "val"):
        raise DataError(f"--split {split}: sft has 'train' and 'val' conversations; expected one of them")
    model = model or load_model(folder)
    if data is None:
        train, val = split_conversations(args)
        conversations = val if split == "val" else train
    else:
        conversations = read_chat(data)
    examples = chat_examples(model, conversations, args.sequence_length, args.train_on_prompt)
    inputs, targets, weights = final_validation(examples, args) if data is None else next_token_arrays(examples)
    return {figure_name("loss", split): mean_cross_entropy(model, inputs, targets, args.batch_size, weights)}


def answer(model, prompt, length, temperature=0.8, seed=None):
    """The model's answer to one user message, rendered by its chat template: at most `length`
    new tokens, fewer where the context ends first; None, with a line saying why, where the
    rendered message leaves the context no room."""
    import zoo

    ids = model.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    window = model.backbone.max_sequence_length
    if len(ids) >= window:
        print(f"sample skipped: --prompt renders as {len(ids)} tokens and the context is {window}; "
              "expected a shorter --prompt", flush=True)
        return None
    if len(ids) + length > window:
        print(f"sample: {window - len(ids)} new tokens, not --sample-length {length}: the context is {window} "
              f"and the prompt {len(ids)}", flush=True)
        length = window - len(ids)
    new = zoo.generate(model, [ids], length, temperature=temperature, seed=seed,
                       stop_token_ids=model.tokenizer.end_token_ids).sequences[0]
    return model.tokenizer.detokenize([t for t in new if t not in model.tokenizer.end_token_ids])


def report(model, args, folder, data):
    """The saved model's validation loss (`evaluate`) and samples.txt: its
    answer to --prompt."""
    figures = evaluate(folder.path, model=model)
    if args.sample_length > 0:
        text = answer(model, args.prompt, args.sample_length, seed=args.seed)
        if text is not None:
            save_sample(f"user: {args.prompt}\nassistant: {text}", folder)
    return figures


def main(argv=None):
    """Fine-tunes as the module's docstring says; returns the validation
    loss printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
