"""Fine-tune a pretrained causal LM (GPT-2, Llama, Qwen, SmolLM2, Mistral) on a text file, with its own tokenizer.

    python -m recipes.gpt_finetune       # GPT-2 small (hf://openai-community/gpt2) on Tiny Shakespeare
    python -m recipes.gpt_finetune --pretrained gpt2 --output runs/gpt_finetune
    python -m recipes.gpt_finetune --pretrained SmolLM2-135M --lora 8 --learning-rate 1e-3
    python -m recipes.gpt_finetune --pretrained hf://openai-community/gpt2

--pretrained is a checkpoint folder: a keras-hub preset
(`keras_hub.models.GPT2CausalLM.from_preset("gpt2_base_en").save_to_preset("gpt2_base_en")`)
or a Hugging Face folder (`huggingface-cli download HuggingFaceTB/SmolLM2-135M
--local-dir SmolLM2-135M`), or a handle (`hf://ORG/NAME[@REVISION]`,
downloaded into the Hugging Face cache), loaded by `zoo.from_pretrained`
with its tokenizer. With --lora RANK only low-rank adapters (Keras' LoRA, Hu et al.
2021) on every attention and feed-forward projection train (or those of
--lora-targets); the rest stays frozen, and the saved model reloads with
them. --quantize, --accumulate and --remat are the other memory levers
(docs/fine-tuning.md, "Memory levers"). The text (Tiny
Shakespeare by default) is encoded with that tokenizer, split 90/10, and
trained on in random windows of --sequence-length tokens, with AdamW (a
linear warm-up, then cosine decay to a tenth of the peak rate, weight decay
on the matrices, global clipping 1.0). The validation loss (nats per
token) is estimated on --eval-batches fixed random windows of the last 10%,
before and after, and a sample continues --prompt.

Writes to --output: `model.keras` (the fine-tuned causal LM carrying its
tokenizer; `zoo sample RUN "prompt"` continues text with it),
`history.csv`, `curves.png`, `logs/` (TensorBoard), `samples.txt` and
`run.json`. The last two lines are `run folder: RUN` and `val_loss=...`.
`zoo.export(zoo.load(RUN / "model.keras"), DIR, format="huggingface")`
writes the result as a checkpoint folder again.
"""

import re
import sys
from pathlib import Path

from recipes import lm_data
from recipes.errors import run_recipe
from recipes.lm_data import LORA_TARGETS, add_language_model_flags, eval_inputs, fit_steps, save_sample  # noqa: F401
from recipes.recipe import run

# --- Defaults: a short fine-tuning run of GPT-2 small (124M) on one CPU or GPU.
DEFAULTS = dict(
    data="tinyshakespeare",  # a registered data set (fetched and cached), a text file, or tfds:NAME
    preset=None,  # the model is --pretrained's
    pretrained="hf://openai-community/gpt2",  # a checkpoint folder or handle; GPT-2 small, downloaded once
    lora=0,  # LoRA rank; 0 fine-tunes every weight
    steps=300,
    batch_size=8,
    sequence_length=256,  # tokens per window (at most the checkpoint's context)
    learning_rate=6e-5,  # peak; fine-tuning rates are 10-100x below pretraining's
    min_learning_rate_fraction=0.1,
    warmup_steps=30,
    weight_decay=0.01,
    beta_2=0.99,
    clipnorm=1.0,
    train_fraction=0.9,
    steps_per_epoch=50,  # one point of the learning curves
    epoch_eval_batches=8,  # validation batches per epoch, for the curves
    eval_batches=40,  # validation batches of the final estimate
    prompt="ROMEO:",
    sample_length=100,  # new tokens of the sample
    jit_compile="auto",
    output="runs/gpt_finetune",
    seed=1337,
)


def encode_text(tokenizer, text):
    """The whole text as one (N,) int32 array of token ids.

    The text is cut after each blank line and the pieces are encoded as one
    batch (GPT-2's pre-tokenizer splits at whitespace, so the pieces
    tokenize as the whole would, up to how a blank line's newlines group).
    """
    import numpy as np

    pieces = [p for p in re.split(r"(?<=\n\n)", text) if p]
    rows = tokenizer(pieces)
    rows = rows.to_list() if hasattr(rows, "to_list") else rows
    return np.concatenate([np.asarray(r, "int32").reshape(-1) for r in rows]) if rows else np.zeros(0, "int32")


def split_ids(ids, source, train_fraction, sequence_length):
    """The first and last parts of the token stream, or a DataError when
    either is too short for one window."""
    return lm_data.split_ids(ids, source, train_fraction, sequence_length, hint=" (or a smaller --sequence-length)")


def evaluate(folder, data=None, split="val", model=None):
    """The run's validation loss (mean cross-entropy per token, nats) on
    `split` of `data`, as the recipe printed it last.

    Args:
        folder: the run folder.
        data: a text file; None is the run's own --data.
        split: "val" (the last 10% of the tokens) or "train" (the first 90%).
        model: the loaded model, or None to load `folder/model.keras`.

    Returns:
        `{"val_loss": float}` on the validation split, `{"<split>_loss": float}` on another.
    """
    from recipes.lm_data import split_loss

    def train_and_val(model, text, data, args):
        ids = encode_text(model.tokenizer, text)
        train, val = split_ids(ids, data, DEFAULTS["train_fraction"], args["sequence_length"])
        return train, val, args["sequence_length"]

    return split_loss("gpt_finetune", folder, data, split, model, train_and_val)


def sample(model, prompt="ROMEO:", length=100, temperature=0.8, top_p=None, top_k=None, seed=None):
    """`prompt` and `length` new tokens of it, decoded, from `zoo.generate`.

    Example:
    ```python
    lm = zoo.load("runs/gpt_finetune/model.keras")
    print(sample(lm, "ROMEO:", 50, seed=0))
    ```
    """
    import zoo

    sampler = zoo.generation.sampler_options(top_p, top_k)
    return zoo.generate(model, prompt, max_new_tokens=length, temperature=temperature, seed=seed, **sampler)


def make_parser():
    """The recipe's flags (`zoo train gpt_finetune -h`)."""
    from recipes.flags import POSITIVE_INT, recipe_parser

    parser = recipe_parser(__doc__.splitlines()[0], DEFAULTS, prog="zoo train gpt_finetune")
    parser.add_argument("--pretrained", default=DEFAULTS["pretrained"],
                        help="a causal-LM checkpoint: a folder (keras-hub preset, or Hugging Face: config.json + "
                        "model.safetensors) or a handle (hf://ORG/NAME[@REVISION])")
    parser.add_argument("--sequence-length", type=POSITIVE_INT, default=DEFAULTS["sequence_length"],
                        help="tokens per window")
    add_language_model_flags(parser, DEFAULTS, "new tokens")
    lm_data.add_fine_tuning_flags(parser, DEFAULTS)
    parser.add_argument("--prompt", default=DEFAULTS["prompt"], help="the text the sample continues")
    return parser


def parse(argv):
    """The flags, checked against what the checkpoint fixes."""
    parser = make_parser()
    args = parser.parse_args(argv)
    lm_data.check_pretrained_flags(parser, args, "gpt_finetune")
    return args


def load_checkpoint(args):
    """(model, the checkpoint's parameter count): --pretrained with its
    tokenizer, LoRA adapters added with --lora."""
    return lm_data.load_checkpoint(args, make_parser())


def read_data(args):
    """The checkpoint (`load_checkpoint`) and the train and validation ids
    of --data in its tokens, checked before anything is written: a dict of
    model, train_ids, val_ids."""
    import numpy as np

    from zoo.data import read_text

    model, parameters = load_checkpoint(args)
    ids = encode_text(model.tokenizer, read_text(args.data))
    train_ids, val_ids = split_ids(ids, args.data, DEFAULTS["train_fraction"], args.sequence_length)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    print(
        f"gpt_finetune: {args.pretrained} ({parameters:,} parameters, {trainable:,} trained), {len(ids):,} tokens of "
        f"{Path(args.data).name}, windows of {args.sequence_length}",
        flush=True,
    )
    return dict(model=model, train_ids=train_ids, val_ids=val_ids)


def open_folder(args, data):
    """The run folder (the tokenizer is inside model.keras)."""
    from recipes.run_folder import OutputFolder, run_config

    config = run_config("gpt_finetune", args, args.pretrained)
    return OutputFolder(args.output, args.overwrite, config=config, strategy=args.strategy)


def make_model(args, data):
    """The checkpoint compiled: AdamW with a warm-up and cosine decay to a
    tenth of the peak; the cross-entropy loss."""
    import keras

    from recipes.lm_data import compile_finetuning

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return compile_finetuning(data["model"], args, loss, DEFAULTS)


def fit(model, args, folder, data):
    """The validation loss before, then --steps steps; model.keras is the
    final model, with its tokenizer; curves.png."""
    from recipes.lm_data import mean_cross_entropy
    from recipes.plots import write_curves

    x_val, y_val = eval_inputs(data["val_ids"], args.batch_size, args.sequence_length, args.eval_batches, seed=0)
    before = mean_cross_entropy(model, x_val, y_val, args.batch_size)  # the windows `evaluate` scores
    print(f"val_loss before fine-tuning: {before:.4f}", flush=True)
    fit_steps(model, args, folder, data["train_ids"], data["val_ids"], args.sequence_length,
              DEFAULTS["epoch_eval_batches"], done="fine-tuned")
    write_curves(folder, model, title=f"{Path(args.pretrained).name} fine-tuned on {Path(args.data).name}")
    return {"val_loss_before": before}


def report(model, args, folder, data):
    """The saved model's validation loss (`evaluate`) and samples.txt."""
    figures = evaluate(folder.path, model=model)
    write_sample(model, args, folder)
    return figures


def write_sample(model, args, folder):
    """samples.txt: --prompt and --sample-length new tokens, printed."""
    if args.sample_length > 0:
        save_sample(sample(model, args.prompt, args.sample_length, seed=args.seed), folder)


def main(argv=None):
    """Fine-tunes as the module's docstring says; returns the validation
    loss printed last."""
    return run(sys.modules[__name__], argv)


if __name__ == "__main__":
    run_recipe(main)
