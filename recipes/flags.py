"""The flags every recipe has, and what they set before any work starts:
the preset and its size overrides, XLA compilation, precision.

Only the standard library at import time, so that `zoo train NAME -h`
answers before any backend loads.
"""

import argparse
import ast
import difflib
import importlib.util
import math
import os
from pathlib import Path

JIT_COMPILE = ("auto", "true", "false", "fusible")
FUSIBLE_XLA_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_ops_to_cluster=FUSIBLE"
SIZE_FLAGS = ("num_layers", "hidden_dim", "num_heads", "dropout", "intermediate_dim")


class Number:
    """An argparse `type`: a whole number (`kind=int`) or a finite number
    (`float`) within bounds, or one line naming the value and what was
    expected (`argument --steps: -5: expected a whole number >= 1`), at
    parse time, before anything loads or is written.

    Args:
        kind: int or float.
        minimum: the smallest value allowed, or None.
        above: the value must be greater than this, or None.
        below: the value must be less than this, or None.
        maximum: the largest value allowed, or None.
    """

    def __init__(self, kind, minimum=None, above=None, below=None, maximum=None):
        self.kind, self.minimum, self.above, self.below, self.maximum = kind, minimum, above, below, maximum

    @property
    def expected(self):
        """'a whole number >= 1', 'a number in [0, 1)', ..."""
        what = "a whole number" if self.kind is int else "a number"
        lower = ("[", ">=", self.minimum) if self.minimum is not None else ("(", ">", self.above)
        upper = ("]", "<=", self.maximum) if self.maximum is not None else (")", "<", self.below)
        if lower[2] is not None and upper[2] is not None:
            return f"{what} in {lower[0]}{lower[2]}, {upper[2]}{upper[0]}"
        for _, sign, bound in (lower, upper):
            if bound is not None:
                return f"{what} {sign} {bound}"
        return what

    def __call__(self, text):
        try:
            value = self.kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not self.within(value):
            raise argparse.ArgumentTypeError(f"{text}: expected {self.expected}")
        return value

    def within(self, value):
        return ((self.minimum is None or value >= self.minimum) and (self.above is None or value > self.above)
                and (self.below is None or value < self.below) and (self.maximum is None or value <= self.maximum))


POSITIVE_INT = Number(int, minimum=1)  # steps, epochs, batch size, sizes
COUNT = Number(int, minimum=0)  # how many of something, 0 for none
POSITIVE = Number(float, above=0)  # a learning rate, a time budget
NON_NEGATIVE = Number(float, minimum=0)  # a weight decay, a power
RATE = Number(float, minimum=0, below=1)  # a dropout rate, label smoothing, a momentum
FRACTION = Number(float, minimum=0, maximum=1)  # a share of the steps or of the data
SEED = Number(int, minimum=0, maximum=2**32 - 1)  # what NumPy takes
PORT = Number(int, minimum=0, maximum=65535)  # a TCP port, 0: a free one


def strategies():
    """`zoo.training.STRATEGIES`, read from its source file: importing any
    `zoo` module loads Keras, seconds a `-h` should not wait for."""
    source = Path(importlib.util.find_spec("zoo").origin).parent / "training" / "distribution.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STRATEGIES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{source}: no STRATEGIES")


def recipe_parser(description, defaults, prog=None):
    """The flags every recipe has, with the recipe's defaults.

    Args:
        description: str, the recipe's one-line summary.
        defaults: dict with at least data, preset, batch_size,
            learning_rate, output and one of steps / epochs; a size
            (`hidden_dim`, `intermediate_dim`, ...) in it is the recipe's
            documented override of the preset, echoed at start and kept in
            run.json.
        prog: str, the program name in usage lines.

    Returns:
        An `argparse.ArgumentParser`.

    Example:
    ```python
    parser = recipe_parser("My recipe", dict(data="toy", preset="gpt-nano", steps=10,
                                             batch_size=4, learning_rate=1e-3, output="runs/mine"))
    args = parser.parse_args(["--steps", "2"])
    ```
    """
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--data", default=defaults["data"], type=data_source, help="a data set name (`zoo data list`: fetched, checked and cached), a local path, or tfds:NAME (TensorFlow Datasets)"
    )
    parser.add_argument("--preset", default=defaults["preset"], help="the zoo preset (`zoo presets` lists them)")
    if "steps" in defaults:
        parser.add_argument("--steps", type=POSITIVE_INT, default=defaults["steps"], help="training steps")
    if "epochs" in defaults:
        parser.add_argument("--epochs", type=POSITIVE_INT, default=defaults["epochs"],
                            help="passes over the training data")
    parser.add_argument("--batch-size", type=POSITIVE_INT, default=defaults["batch_size"], help="examples per step")
    parser.add_argument("--learning-rate", type=POSITIVE, default=defaults["learning_rate"], help="peak learning rate")
    override = "overrides the preset's %s (echoed at start, kept in run.json)"
    for size in ("num_layers", "hidden_dim", "num_heads"):
        parser.add_argument("--" + size.replace("_", "-"), type=POSITIVE_INT, default=defaults.get(size),
                            help=override % size)
    parser.add_argument("--dropout", type=RATE, default=defaults.get("dropout"), help=override % "dropout")
    if "intermediate_dim" in defaults:
        parser.add_argument("--intermediate-dim", type=POSITIVE_INT, default=defaults["intermediate_dim"],
                            help=override % "intermediate_dim")
    parser.add_argument("--output", default=defaults["output"], help="the run folder (model, logs, plots, run.json)")
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run in --output")
    parser.add_argument(
        "--mixed-precision", action=argparse.BooleanOptionalAction, default=defaults.get("mixed_precision", False),
        help="mixed_bfloat16 compute" + (" (default: where the CPU computes bfloat16 natively)"
                                         if defaults.get("mixed_precision") == "auto" else ""),
    )
    parser.add_argument(
        "--jit-compile", default=defaults.get("jit_compile", "auto"), choices=JIT_COMPILE,
        help="XLA compilation of the train step; 'fusible': XLA for the element-wise ops only "
        "(TensorFlow), the matrix products by oneDNN",
    )
    parser.add_argument("--strategy", default="default", choices=strategies(), help="distribution strategy")
    parser.add_argument("--mesh", default=None, metavar="BATCHxMODEL",
                        help="--strategy model-parallel (JAX): devices along the batch and model axes, e.g. 2x4")
    parser.add_argument("--seed", type=SEED, default=defaults.get("seed", 1337), help="random seed")
    return parser


def add_bert_flags(parser, defaults):
    """The BERT recipes' --sequence-length, --warmup-fraction and
    --weight-decay."""
    parser.add_argument("--sequence-length", type=POSITIVE_INT, default=defaults["sequence_length"],
                        help="longest [CLS] ... [SEP] in tokens (longer sentences are cut)")
    parser.add_argument("--warmup-fraction", type=FRACTION, default=defaults["warmup_fraction"],
                        help="share of the steps in the linear warm-up")
    parser.add_argument("--weight-decay", type=NON_NEGATIVE, default=defaults["weight_decay"],
                        help="AdamW weight decay")


def data_source(value):
    """--data's check at parse time: a tfds: source needs the
    tensorflow-datasets package, named before any work starts."""
    if value.startswith("tfds:") and importlib.util.find_spec("tensorflow_datasets") is None:
        raise argparse.ArgumentTypeError(
            f"{value} needs the `tensorflow_datasets` package, which is not installed; "
            "expected `pip install tensorflow-datasets`"
        )
    return value


def check_preset(parser, name, family, given=None, sizes=None):
    """The preset `name` of `family` (a family name or a tuple of them), or
    a parser error (exit 2) with the closest names, before any work starts;
    `given` is what the user typed when the recipe completed it (gpt_char:
    "nano" -> "gpt-nano"). `sizes` (`size_overrides(args)`) are checked
    against the preset's other sizes there too: `--num-heads 5` on a width
    of 128 is refused in one line, not after the run folder is opened."""
    from recipes.startup import load_keras

    load_keras()
    import zoo

    families = (family,) if isinstance(family, str) else tuple(family)
    names = [preset for each in families for preset in zoo.list_presets(each)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        parser.error(
            f"--preset {given or name}: unknown {' or '.join(families)} preset; {hint}expected one of {', '.join(names)}"
        )
    if sizes:
        try:
            zoo.preset_info(name, **sizes)
        except ValueError as error:
            flags = " ".join(f"--{size.replace('_', '-')} {value}" for size, value in sorted(sizes.items()))
            parser.error(f"{flags} on {name}: {error}")
    return name


def size_overrides(args):
    """The preset sizes the flags override: {name: value} of the size
    flags that are set (by the user or as the recipe's documented
    default)."""
    return {n: getattr(args, n) for n in SIZE_FLAGS if getattr(args, n, None) is not None}


def given_flags(make_parser, argv, names):
    """The flags among `names` (their dests) that the command line `argv`
    sets, whatever the value: `argv` parsed again by `make_parser()` with
    defaults no command line can give."""
    unset = object()
    probe = make_parser()
    probe.set_defaults(**{name: unset for name in names})
    args = probe.parse_args(argv)
    return {name for name in names if getattr(args, name) is not unset}


def startup_line(what, preset, overrides):
    """'gpt-nano' or 'gpt-nano, overriding hidden_dim=32 num_layers=1'."""
    if not overrides:
        return f"{what}: preset {preset}"
    return f"{what}: preset {preset}, overriding " + " ".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def require(module, why):
    """Raises a one-line `DataError` at start, before any training, when
    the optional package `module` is not installed (`why` says who needs
    it, e.g. "--data tfds:..." or "the BLEU score")."""
    if importlib.util.find_spec(module) is None:
        from zoo.data import DataError

        raise DataError(f"{why} needs the `{module}` package, which is not installed; expected `pip install {module}`")


def jit_compile_flag(args):
    """Keras' `jit_compile` for --jit-compile; call it before the first
    TensorFlow function runs.

    "fusible" (TensorFlow only) turns on XLA auto-clustering of the
    element-wise ops (`--tf_xla_ops_to_cluster=FUSIBLE`) and leaves the
    matrix products to TensorFlow's oneDNN kernels, which use a CPU's bf16
    (AVX512-BF16 / AMX) units where XLA's CPU dots do not.
    """
    import keras

    if args.jit_compile == "fusible":
        if keras.backend.backend() != "tensorflow":
            return True
        enable_fusible_autoclustering()
        return False
    return {"auto": "auto", "true": True, "false": False}[args.jit_compile]


def enable_fusible_autoclustering():
    """XLA auto-clustering of TensorFlow's element-wise ops on the CPU.

    TensorFlow reads TF_XLA_FLAGS once, when it first optimizes a graph, so
    this must run before any `tf.function` has; flags already set by the
    user are kept.
    """
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_auto_jit" not in flags:
        os.environ["TF_XLA_FLAGS"] = f"{flags} {FUSIBLE_XLA_FLAGS}".strip()


def set_precision(mixed):
    """float32, or mixed_bfloat16 compute; "auto" is mixed_bfloat16 where
    the CPU has bfloat16 instructions (AVX512-BF16 or AMX). Returns whether
    the compute is bfloat16."""
    import keras

    if mixed == "auto":
        mixed = native_bfloat16()
        print(f"precision: {'mixed_bfloat16 (the CPU computes bfloat16)' if mixed else 'float32'}", flush=True)
    keras.config.set_dtype_policy("mixed_bfloat16" if mixed else "float32")
    return bool(mixed)


def native_bfloat16(cpuinfo="/proc/cpuinfo"):
    """Whether the CPU has bfloat16 instructions (x86 AVX512-BF16 or AMX),
    read from Linux's `cpuinfo` (False where it is not there)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
