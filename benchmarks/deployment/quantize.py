"""Quantization: weight bytes and CPU generation speed per mode, beside
keras-hub's GPT2CausalLM quantized the same way, and the quality change of
trained runs.

    KERAS_BACKEND=tensorflow python benchmarks/deployment/quantize.py                       # gpt2-small size, random weights
    python benchmarks/deployment/quantize.py --runs runs/gpt_char runs/translate runs/bert_classify   # and quality per mode
    python benchmarks/deployment/quantize.py --quick --no-speed --runs runs/gpt_char         # a fast look

Speed: a zoo GPT (`GPTCausalLM`) and keras-hub's `GPT2CausalLM`
(`GPT2Backbone`, no download) of the same size with random weights (seed 0),
each as float32 and after `quantize(mode)` for every mode; greedy decoding
of `--new-tokens` tokens from an 8-token prompt, batch 1. Each figure is new
tokens per second, the median of `--repeats` calls after a first
(compiling) call; the zoo and keras-hub calls alternate, so that the load of
a shared machine falls on both alike. Weight bytes are the model's
variables as stored (int4 packs two weights a byte).

Quality (`--runs`): each run folder's own metric (the recipe's `evaluate`,
what `zoo eval RUN` prints) for the float model and after quantizing it in
memory (`zoo eval RUN --quantize MODE`): gpt_char the validation loss,
translate the BLEU, bert_classify the dev accuracy; a loss's perplexity
(exp of the mean cross-entropy) is printed below it.
"""

import argparse
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the recipes, for --runs
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generation"))  # generate.py's measure

import keras  # noqa: E402
import numpy as np  # noqa: E402

from zoo import generate  # noqa: E402
from zoo.models import QUANTIZATION_MODES, GPTBackbone, GPTCausalLM  # noqa: E402
from generate import measure  # noqa: E402  (the zoo and keras-hub calls alternating)

# --- The configuration: gpt2-small's sizes --------------------------------------
VOCABULARY, LAYERS, WIDTH, HEADS, CONTEXT = 50257, 12, 768, 12, 1024
PROMPT, NEW_TOKENS = 8, 32


def zoo_model(args, mode):
    keras.utils.set_random_seed(0)
    backbone = GPTBackbone(args.vocabulary, args.layers, args.heads, args.width, 4 * args.width,
                           max_sequence_length=args.context)
    lm = GPTCausalLM(backbone)
    if mode:
        lm.quantize(mode)
    return lm


def keras_hub_model(args, mode):
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocabulary, num_layers=args.layers, num_heads=args.heads, hidden_dim=args.width,
        intermediate_dim=4 * args.width, max_sequence_length=args.context,
    )
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    if mode:
        with warnings.catch_warnings():  # keras-hub quantizes every layer and warns for those without `quantize`
            warnings.filterwarnings("ignore", message=r"(Layer \w+ does not have a `quantize`|Invalid quantization mode)")
            causal_lm.quantize(mode)
    causal_lm.compile(sampler="greedy")
    return causal_lm


def weight_bytes(model):
    return sum(int(np.prod(w.shape)) * np.dtype(keras.backend.standardize_dtype(w.dtype)).itemsize
               for w in model.weights)


def run_speed(args, modes):
    prompt = [list(range(1, PROMPT + 1))]
    hub_inputs = {"token_ids": np.zeros((1, PROMPT + args.new_tokens), "int32"),
                  "padding_mask": np.zeros((1, PROMPT + args.new_tokens), bool)}
    hub_inputs["token_ids"][0, :PROMPT] = np.arange(1, PROMPT + 1)
    hub_inputs["padding_mask"][0, :PROMPT] = True
    print(f"{'mode':<9}{'runner':<11}{'weight MB':>10}{'first call':>12}{'median':>10}{'new tok/s':>11}")
    for mode in (None, *modes):
        models = {"zoo": zoo_model(args, mode)}
        runners = {"zoo": lambda: generate(models["zoo"], prompt, args.new_tokens)}
        if not args.no_keras_hub:
            try:
                models["keras-hub"] = keras_hub_model(args, mode)
                runners["keras-hub"] = lambda: models["keras-hub"].generate(hub_inputs, stop_token_ids=None)
            except Exception as error:  # a mode keras-hub's model does not take: said, and the zoo still runs
                print(f"{mode or 'float32':<9}{'keras-hub':<11}  not run: {type(error).__name__}: {error}")
        first, median = measure(runners, args.repeats)
        for name in runners:
            print(f"{mode or 'float32':<9}{name:<11}{weight_bytes(models[name]) / 1e6:>10.1f}{first[name]:>11.2f}s"
                  f"{median[name]:>9.3f}s{args.new_tokens / median[name]:>11.1f}")


def run_quality(folders, modes):
    from recipes.cli import open_run

    print(f"\n{'run':<28}{'metric':<14}{'float32':>10}" + "".join(f"{mode + ' (change)':>20}" for mode in modes))
    for folder in folders:
        values = {}
        for mode in (None, *modes):
            name, recipe, model = open_run(folder, quantize=mode)
            figures = recipe.evaluate(folder, split="dev" if name == "bert_classify" else "val", model=model)
            metric, values[mode] = list(figures.items())[-1]  # the recipe's own figure
        change = "".join(f"{values[m]:.4f} ({values[m] - values[None]:+.4f})".rjust(20) for m in modes)
        print(f"{str(folder):<28}{metric:<14}{values[None]:>10.4f}{change}")
        if "loss" in metric:  # a mean cross-entropy in nats: its perplexity too
            ratio = "".join(f"{np.exp(values[m]):.4f} ({np.exp(values[m] - values[None]) - 1:+.2%})".rjust(20)
                            for m in modes)
            print(f"{'':<28}{'perplexity':<14}{np.exp(values[None]):>10.4f}{ratio}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(QUANTIZATION_MODES), help="(default: %(default)s)")
    parser.add_argument("--vocabulary", type=int, default=VOCABULARY, help="(default %(default)s)")
    parser.add_argument("--layers", type=int, default=LAYERS, help="(default %(default)s)")
    parser.add_argument("--width", type=int, default=WIDTH, help="d_model; d_ff is 4x (default %(default)s)")
    parser.add_argument("--heads", type=int, default=HEADS, help="(default %(default)s)")
    parser.add_argument("--context", type=int, default=CONTEXT, help="(default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="(default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after the first (default 3)")
    parser.add_argument("--no-keras-hub", action="store_true", help="skip keras-hub")
    parser.add_argument("--no-speed", action="store_true", help="skip the bytes and tokens/s table")
    parser.add_argument("--runs", nargs="*", default=[], metavar="RUN",
                        help="run folders (gpt_char, translate, bert_classify, ...) to evaluate per mode")
    parser.add_argument("--quick", action="store_true",
                        help="a small GPT (2 layers, width 128, vocabulary 1000, context 128), 8 new tokens, 1 repeat")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in QUANTIZATION_MODES:
            parser.error(f"--modes: {mode!r} is not a mode; expected some of {', '.join(QUANTIZATION_MODES)}")
    if args.quick:
        args.vocabulary, args.layers, args.width, args.heads, args.context = 1000, 2, 128, 4, 128
        args.new_tokens, args.repeats = 8, 1
    print(f"backend {keras.config.backend()}, keras {keras.__version__}, {os.cpu_count()} CPUs; "
          f"{args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocabulary}, "
          f"context {args.context}; greedy, batch 1, prompt {PROMPT}, {args.new_tokens} new tokens; "
          f"median of {args.repeats}")
    if not args.no_speed:
        run_speed(args, modes)
    if args.runs:
        run_quality([Path(f) for f in args.runs], modes)


if __name__ == "__main__":
    main()
