"""Generation speed: zoo with its key/value cache, zoo without it, keras-hub.

    KERAS_BACKEND=tensorflow python benchmarks/generation/generate.py            # everything
    python benchmarks/generation/generate.py --quick                             # a fast look
    python benchmarks/generation/generate.py --settings 256x1 --no-growth        # one setting
    python benchmarks/generation/generate.py --no-settings --width 768 --heads 12  # growth at GPT-2 width
    python benchmarks/generation/generate.py --family llama                      # the Llama block
    python benchmarks/generation/generate.py --settings 256x1 --stored-kernels   # and the zoo with its kernels as stored

The same model for all three: 4 layers, width 128, 4 heads, d_ff 512, a
65-token vocabulary (characters), random weights, greedy decoding from an
8-token prompt to the end of the context (as
shared/anchors/keras_hub_generate.py). With `--family gpt` (the default)
it is GPT-2's block against keras-hub's `GPT2CausalLM`; with `--family
llama`, the Llama block (RMSNorm, rotary, SwiGLU, 2 key/value heads of the
4) against keras-hub's `LlamaCausalLM` at the same sizes. keras-hub runs
with `compile(sampler="greedy", jit_compile=True)`, its fastest setting.

Each figure is new tokens per second: batch x new tokens / seconds, the
median of a few calls after a first (compiling) call, whose time is shown
apart. The runs of zoo and keras-hub alternate, so that the load of a shared
machine falls on both alike. "Uncached" re-runs the whole model over the
padded context for every new token (so fewer tokens are generated).
Then the time per new token as the generated length grows, from an
8-token prompt with a 1032-position context.

`--stored-kernels` adds a second zoo row, "zoo-stored": its decoding loop
reads the Dense kernels in their stored (in, out) layout, where on a GPU
the zoo's loop carries them transposed (`zoo.generation.loop.KernelLayout`):
the layout's effect, timed in the same run (on a CPU the two rows run the
same program).

`--family marian` times beam-4 translation instead: the zoo's `opus-mt`
preset (Marian's base shape: 6 + 6 layers, width 512, 8 heads, d_ff
2048, a 58,101-token vocabulary; random weights) against keras-hub's
`BartSeq2SeqLM` at the same shape with `BeamSampler(num_beams=4)`,
batches of SENTENCES sources of SOURCE_LENGTH tokens, each decoded to
TARGET_TOKENS new tokens (no stop token, so both do the same work), in
sentences per second.

`--profile` (JAX) then traces one more call of the zoo and of keras-hub at
each setting and prints, per new token, the kernels the decoding loop
launches and their time against the token's time (the rest is the device
waiting on launches), and the 5 kernels with the most time
(`benchmarks/gpu/kernel_profile.py`).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# --profile reads the kernels with the GPU benchmarks' kernel_profile.py
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu"))
DUMP_DIR = None
if "--profile" in sys.argv:  # before JAX starts: the profile reads which kernels are the loop's from XLA's programs
    from kernel_profile import dump_flags

    DUMP_DIR = tempfile.mkdtemp(prefix="generate_hlo_")
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), dump_flags(DUMP_DIR)]))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from zoo import generate  # noqa: E402
from zoo.models import GPTBackbone, GPTCausalLM, LlamaBackbone, LlamaCausalLM  # noqa: E402

# --- The configuration ---------------------------------------------------------
VOCABULARY = 65
LAYERS, WIDTH, HEADS, FEED_FORWARD = 4, 128, 4, 512
FAMILY = "gpt"
KEY_VALUE_HEADS = 2  # the Llama block's grouped-query attention
PROMPT = 8
SETTINGS = ((256, 1), (256, 8), (1024, 1))  # (context, batch)
GROWTH = (64, 128, 256, 512, 1024)  # new tokens, context 1024 + PROMPT
UNCACHED_TOKENS = 32
SENTENCES, SOURCE_LENGTH, TARGET_TOKENS, BEAMS = 8, 24, 32, 4  # --family marian


def zoo_model(context):
    keras.utils.set_random_seed(0)
    if FAMILY == "llama":
        return LlamaCausalLM(LlamaBackbone(VOCABULARY, LAYERS, HEADS, WIDTH, FEED_FORWARD,
                                           num_key_value_heads=KEY_VALUE_HEADS, max_sequence_length=context))
    backbone = GPTBackbone(
        VOCABULARY, LAYERS, HEADS, WIDTH, FEED_FORWARD, max_sequence_length=context, dropout=0.0
    )
    return GPTCausalLM(backbone)


def keras_hub_model(context):
    import keras_hub

    keras.utils.set_random_seed(0)
    if FAMILY == "llama":
        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=VOCABULARY, num_layers=LAYERS, num_query_heads=HEADS, hidden_dim=WIDTH,
            intermediate_dim=FEED_FORWARD, num_key_value_heads=KEY_VALUE_HEADS, tie_word_embeddings=True,
        )
        causal_lm = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
        causal_lm.compile(sampler="greedy", jit_compile=True)
        return causal_lm
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=WIDTH,
        intermediate_dim=FEED_FORWARD,
        max_sequence_length=context,
    )
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler="greedy", jit_compile=True)
    return causal_lm


def prompts(batch):
    return [list(range(1, PROMPT + 1))] * batch


def keras_hub_inputs(batch, length):
    token_ids = np.zeros((batch, length), "int32")
    token_ids[:, :PROMPT] = np.arange(1, PROMPT + 1)
    mask = np.zeros((batch, length), bool)
    mask[:, :PROMPT] = True
    return {"token_ids": token_ids, "padding_mask": mask}


def uncached_generator(model, batch, length, new_tokens):
    """Greedy decoding without a cache, compiled like the cached loop: each
    step runs the whole functional model on the (B, length) padded ids."""
    backend = keras.config.backend()

    def loop(ids, mask, trainable=None, non_trainable=None):
        def body(index, ids, mask):
            inputs = {"token_ids": ids, "padding_mask": mask}
            if trainable is None:
                logits = model(inputs)
            else:
                logits, _ = model.stateless_call(trainable, non_trainable, inputs)
            last = ops.take(logits, index - 1, axis=1)  # (B, V)
            token = ops.cast(ops.argmax(last, axis=-1), "int32")[:, None]
            ids = ops.slice_update(ids, [0, index], token)
            mask = ops.slice_update(mask, [0, index], ops.ones_like(token, "int32"))
            return index + 1, ids, mask

        start = ops.convert_to_tensor(PROMPT, "int32")
        _, ids, _ = ops.while_loop(lambda i, *_: i < PROMPT + new_tokens, body, (start, ids, mask))
        return ids

    ids = np.zeros((batch, length), "int32")
    ids[:, :PROMPT] = np.arange(1, PROMPT + 1)
    mask = (ids != 0).astype("int32")
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(loop, jit_compile=True)
        return lambda: compiled(ids, mask).numpy()
    if backend == "jax":
        import jax

        compiled = jax.jit(loop)
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        return lambda: np.asarray(compiled(ids, mask, trainable, non_trainable))
    return lambda: ops.convert_to_numpy(loop(ids, mask))


def kernels_as_stored(run):
    """`run` with the decoding loop reading the Dense kernels in their
    stored layout (`zoo.generation.loop.KernelLayout`), at its compilation
    and at every call."""
    from zoo.generation import loop

    def call():
        chosen, loop.transposes_kernels = loop.transposes_kernels, lambda: False
        try:
            return run()
        finally:
            loop.transposes_kernels = chosen

    return call


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(runners, repeats):
    """First-call and median times of each runner, the runners alternating."""
    first = {name: timed(fn) for name, fn in runners.items()}
    times = {name: [] for name in runners}
    for _ in range(repeats):
        for name, fn in runners.items():
            times[name].append(timed(fn))
    return first, {name: statistics.median(t) for name, t in times.items()}


def profile(runners, counts, median):
    """One more traced call of each runner: its decoding loop's kernels per new token."""
    from kernel_profile import loop_parts, trace_summary

    for name in ("zoo", "zoo-stored", "keras-hub"):
        if name not in runners:
            continue
        summary = trace_summary(runners[name], steps=counts[name], dump_dir=DUMP_DIR, parts=loop_parts)
        loop_ms, loop_launches = summary["parts"].get("loop"), summary["part_launches"].get("loop")
        token_ms = 1000 * median[name] / counts[name]
        if loop_ms is None:
            print(f"    {name}: {summary['launches']:.0f} kernels, {summary['busy_ms']:.3f} ms of kernel time per new "
                  f"token (all of the call), of {token_ms:.3f} ms per token")
        else:
            print(f"    {name}: the loop launches {loop_launches:.0f} kernels per new token, {loop_ms:.3f} ms of kernel "
                  f"time, of {token_ms:.3f} ms per token")
        for ms, kernel in summary["top"]:
            print(f"        {ms:8.4f} ms/token  {kernel[:100]}")


def run_settings(settings, repeats, keras_hub, uncached, profiled=False, stored_kernels=False):
    print(f"{'setting':<22}{'runner':<12}{'first call':>11}{'median':>10}{'new tok/s':>11}{'vs keras-hub':>14}")
    for context, batch in settings:
        new = context - PROMPT
        lm = zoo_model(context)
        runners = {"zoo": lambda: generate(lm, prompts(batch), new)}
        counts = {"zoo": batch * new}
        if stored_kernels:
            stored = zoo_model(context)  # its own compiled functions
            runners["zoo-stored"] = kernels_as_stored(lambda: generate(stored, prompts(batch), new))
            counts["zoo-stored"] = batch * new
        if keras_hub:
            hub = keras_hub_model(context)
            inputs = keras_hub_inputs(batch, context)
            runners["keras-hub"] = lambda: hub.generate(inputs, stop_token_ids=None)
            counts["keras-hub"] = batch * new
        if uncached:
            runners["uncached"] = uncached_generator(lm, batch, context, UNCACHED_TOKENS)
            counts["uncached"] = batch * UNCACHED_TOKENS
        first, median = measure(runners, repeats)
        rates = {name: counts[name] / median[name] for name in runners}
        for name in runners:
            ratio = f"{rates[name] / rates['keras-hub']:.2f}x" if "keras-hub" in rates else "-"
            print(
                f"{f'context {context}, batch {batch}':<22}{name:<12}{first[name]:>10.2f}s"
                f"{median[name]:>9.3f}s{rates[name]:>11,.0f}{ratio:>14}"
            )
        if profiled:
            profile(runners, counts, median)


def run_growth(lengths, repeats, keras_hub):
    context = max(lengths) + PROMPT
    print(f"\nTime per new token as the generated length grows (batch 1, context {context}):")
    print(f"{'new tokens':<12}{'runner':<12}{'first call':>11}{'median':>10}{'ms / token':>12}")
    lm = zoo_model(context)
    hub = keras_hub_model(context) if keras_hub else None
    for new in lengths:
        runners = {"zoo": lambda: generate(lm, prompts(1), new)}
        if hub is not None:
            inputs = keras_hub_inputs(1, PROMPT + new)
            runners["keras-hub"] = lambda: hub.generate(inputs, stop_token_ids=None)
        first, median = measure(runners, repeats)
        for name in runners:
            print(f"{new:<12}{name:<12}{first[name]:>10.2f}s{median[name]:>9.3f}s{1000 * median[name] / new:>12.3f}")


def run_translation(repeats, keras_hub, sentences=SENTENCES):
    """Beam-4 translation at Marian's base shape, sentences per second."""
    import zoo

    keras.utils.set_random_seed(0)
    model = zoo.build("opus-mt", dropout=0.0)
    config = model.get_config()
    vocabulary, start = model.vocabulary_size, model.vocabulary_size - 1  # Marian starts at <pad>, its last id
    sources = np.random.default_rng(0).integers(3, vocabulary - 1, (sentences, SOURCE_LENGTH)).astype("int32")
    print(f"beam-{BEAMS} translation, opus-mt's shape ({model.count_params():,} parameters, random weights): "
          f"{sentences} sources of {SOURCE_LENGTH} tokens, {TARGET_TOKENS} new tokens each")
    runners = {"zoo": lambda: zoo.generation.beam_search(model, [[start]] * sentences, TARGET_TOKENS,
                                                         num_beams=BEAMS, source=sources.tolist())}
    if keras_hub:
        import keras_hub as hub

        keras.utils.set_random_seed(0)
        backbone = hub.models.BartBackbone(
            vocabulary_size=vocabulary, num_layers=config["num_layers"], num_heads=config["num_heads"],
            hidden_dim=config["hidden_dim"], intermediate_dim=config["intermediate_dim"], dropout=0.0,
            max_sequence_length=config["max_sequence_length"])
        bart = hub.models.BartSeq2SeqLM(backbone=backbone, preprocessor=None)
        bart.compile(sampler=hub.samplers.BeamSampler(num_beams=BEAMS), jit_compile=True)
        decoder = np.zeros((sentences, 1 + TARGET_TOKENS), "int32")
        decoder[:, 0] = start
        inputs = {"encoder_token_ids": sources, "encoder_padding_mask": np.ones(sources.shape, bool),
                  "decoder_token_ids": decoder, "decoder_padding_mask": decoder != 0}
        inputs["decoder_padding_mask"][:, 1:] = False
        runners["keras-hub"] = lambda: bart.generate(inputs, stop_token_ids=None)
    first, median = measure(runners, repeats)
    print(f"{'runner':<12}{'first call':>11}{'median':>10}{'sentences/s':>13}{'vs keras-hub':>14}")
    for name in runners:
        ratio = f"{median['keras-hub'] / median[name]:.2f}x" if "keras-hub" in runners else "-"
        print(f"{name:<12}{first[name]:>10.2f}s{median[name]:>9.3f}s{sentences / median[name]:>13.2f}{ratio:>14}")


def main():
    global LAYERS, WIDTH, HEADS, FEED_FORWARD, FAMILY
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default=",".join(f"{c}x{b}" for c, b in SETTINGS),
                        help="CONTEXTxBATCH,... (default: %(default)s)")
    parser.add_argument("--growth", default=",".join(map(str, GROWTH)),
                        help="new-token counts for the per-token table (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after the first (default 5)")
    parser.add_argument("--no-keras-hub", action="store_true", help="skip keras-hub")
    parser.add_argument("--no-uncached", action="store_true", help="skip the uncached zoo loop")
    parser.add_argument("--no-settings", action="store_true", help="skip the tokens/s table")
    parser.add_argument("--no-growth", action="store_true", help="skip the per-token table")
    parser.add_argument("--layers", type=int, default=LAYERS, help="(default %(default)s)")
    parser.add_argument("--width", type=int, default=WIDTH, help="d_model; d_ff is 4x (default %(default)s)")
    parser.add_argument("--heads", type=int, default=HEADS, help="(default %(default)s)")
    parser.add_argument("--family", choices=("gpt", "llama", "marian"), default=FAMILY,
                        help="GPT-2's block against keras-hub's GPT2CausalLM, the Llama block against its "
                             "LlamaCausalLM, or beam-4 translation at Marian's shape against keras-hub's "
                             "BartSeq2SeqLM (default %(default)s)")
    parser.add_argument("--sentences", type=int, nargs="+", default=[SENTENCES], metavar="N",
                        help="with --family marian: the batch sizes, in sources (default %(default)s)")
    parser.add_argument("--stored-kernels", action="store_true",
                        help="add a zoo row whose decoding loop reads the Dense kernels as stored")
    parser.add_argument("--profile", action="store_true",
                        help="trace one more call per setting (JAX): kernels per new token and the 5 longest")
    parser.add_argument("--quick", action="store_true",
                        help="2 timed calls, context 256 at batch 1 only, growth up to 256")
    args = parser.parse_args()
    LAYERS, WIDTH, HEADS, FEED_FORWARD = args.layers, args.width, args.heads, 4 * args.width
    FAMILY = args.family
    settings = [tuple(int(x) for x in s.split("x")) for s in args.settings.split(",") if s]
    growth = [int(n) for n in args.growth.split(",") if n]
    repeats = args.repeats
    if args.quick:
        settings, growth, repeats = [(256, 1)], [n for n in growth if n <= 256], 2
    if FAMILY == "marian":
        print(f"backend {keras.config.backend()}, keras {keras.__version__}, {os.cpu_count()} CPUs; median of {repeats}")
        for sentences in args.sentences:
            run_translation(repeats, not args.no_keras_hub, sentences)
        return
    print(f"backend {keras.config.backend()}, keras {keras.__version__}, {os.cpu_count()} CPUs; "
          f"{FAMILY} block, {LAYERS} layers, width {WIDTH}, {HEADS} heads, vocabulary {VOCABULARY}, "
          f"prompt {PROMPT}, greedy; median of {repeats}")
    if not args.no_settings:
        if args.profile and keras.config.backend() != "jax":
            parser.error("--profile reads a jax.profiler trace: run with KERAS_BACKEND=jax")
        run_settings(settings, repeats, not args.no_keras_hub, not args.no_uncached, args.profile,
                     args.stored_kernels)
    if not args.no_growth:
        run_growth(growth, repeats, not args.no_keras_hub)


if __name__ == "__main__":
    main()
