"""The zoo beside the CPU engines a user would pick instead: llama.cpp,
CTranslate2 and transformers, at the same precision and threads, called in
turn in one run.

    python benchmarks/deployment/cpu_engines.py                         # a short run (a few minutes)
    python benchmarks/deployment/cpu_engines.py --new-tokens 128 --rounds 3 --batches 1,8   # the full run
    python benchmarks/deployment/cpu_engines.py --engines zoo-tensorflow,llama.cpp --precisions int8

The model: SmolLM2-135M's Llama (30 layers, width 576, 9 query heads and
3 key/value heads, feed-forward 1536, vocabulary 49,152, tied head) with
random weights (seed 0), saved once with transformers' `save_pretrained`
into `--work` (a SentencePiece tokenizer trained on Tiny Shakespeare rides
along, for the converters; every engine is given token ids). Each engine
loads that folder its own way:

- zoo-tensorflow, zoo-jax: `zoo.from_pretrained(folder, quantize=...)`
  (per-channel int8 and int4), `zoo.generate` greedy.
- llama.cpp (llama-cpp-python): a GGUF written by llama.cpp's own
  `convert_hf_to_gguf.py` (f32 and q8_0; q4_0 by `llama_model_quantize`
  from the f32 file); the converter is looked for at `--llama-cpp` (an
  unpacked llama.cpp or llama-cpp-python source tree; by default the one
  `pip download --no-deps --no-binary :all: llama-cpp-python -d /tmp/lcpp`
  and `tar xf` unpack under /tmp/lcpp).
  Batch 1 only: llama-cpp-python's `Llama` decodes one sequence.
- ctranslate2: `TransformersConverter` (float32; int8 weights with
  int8 activations, its CPU int8), `Generator.generate_batch` greedy.
- transformers: `AutoModelForCausalLM` on torch's CPU (float32; int8 by
  `torch.ao.quantization.quantize_dynamic` of the Linear layers),
  `generate` greedy.

Each engine runs in its own process (its own thread pool, `--threads`
threads). Per precision and batch the engines are called in turn (A, B, C,
A, B, C, ...): the first call (loading excluded, compiling included) is
reported on its own, the median of `--rounds` calls after it is the
figure. Every call decodes `--new-tokens` tokens after a `--prompt`-token
prompt (random ids, seed 0), no stop token; new tokens/s counts the new
tokens of the whole call (prefill included) over its time. At batch 1 the
weight-read limit is the bytes of the weights read per token (all matrices,
the tied table once: 4, 1 or 0.5 bytes a weight) over the bandwidth of a
large NumPy copy; the last column is the engine's share of it. An engine
that is not installed, or fails, is named and skipped.
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve()
ENGINES = ("zoo-tensorflow", "zoo-jax", "llama.cpp", "ctranslate2", "transformers")
PRECISIONS = ("float32", "int8", "int4")
BYTES_PER_WEIGHT = {"float32": 4, "int8": 1, "int4": 0.5}
# What each engine runs at each precision (None: it has no such mode here).
MODES = {
    "zoo-tensorflow": {"float32": None, "int8": "int8", "int4": "int4"},
    "zoo-jax": {"float32": None, "int8": "int8", "int4": "int4"},
    "llama.cpp": {"float32": "f32", "int8": "q8_0", "int4": "q4_0"},
    "ctranslate2": {"float32": "float32", "int8": "int8"},
    "transformers": {"float32": "float32", "int8": "qint8 dynamic"},
}
# SmolLM2-135M's configuration (transformers' LlamaConfig).
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                    initializer_range=0.041666666666666664)
DOWNLOADS = "/tmp/lcpp"  # where `pip download ... -d /tmp/lcpp` and tar unpack llama-cpp-python's source
TINY_SHAKESPEARE = Path(os.environ.get("ZOO_DATA", "data")) / "tinyshakespeare" / "input.txt"


# --- The shared checkpoint and each engine's copy of it ------------------------------------


def prepare(work, llama_cpp, engines, precisions):
    """The transformers folder (once), and the files each engine converts it to."""
    folder = work / "llama"
    if not (folder / "model.safetensors").exists():
        write_llama_folder(folder)
    if "llama.cpp" in engines and llama_cpp is not None:
        for precision in precisions:
            gguf_file(work, llama_cpp, MODES["llama.cpp"][precision])
    if "ctranslate2" in engines:
        for precision in precisions:
            if precision in MODES["ctranslate2"]:
                ct2_folder(work, MODES["ctranslate2"][precision])
    return folder


def write_llama_folder(folder):
    import sentencepiece
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        input=str(TINY_SHAKESPEARE), model_prefix=str(folder / "tokenizer"), vocab_size=4000, model_type="bpe",
        byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    (folder / "tokenizer.vocab").unlink()
    fast = transformers.LlamaTokenizerFast(vocab_file=str(folder / "tokenizer.model"), legacy=False)
    fast.save_pretrained(str(folder))  # tokenizer.json, which the zoo reads
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2_135M))
    model.save_pretrained(str(folder))


def gguf_file(work, llama_cpp, mode):
    path = work / f"llama-{mode}.gguf"
    if path.exists():
        return path
    if mode == "q4_0":  # the converter writes f32, f16, bf16 and q8_0; q4_0 is llama.cpp's quantizer's
        import llama_cpp as lcpp

        source = gguf_file(work, llama_cpp, "f32")
        params = lcpp.llama_model_quantize_default_params()
        params.ftype = lcpp.LLAMA_FTYPE_MOSTLY_Q4_0
        params.nthread = 2
        if quiet(lambda: lcpp.llama_model_quantize(str(source).encode(), str(path).encode(), params)) != 0:
            raise RuntimeError(f"llama_model_quantize failed for {path}")
        return path
    env = dict(os.environ, PYTHONPATH=str(llama_cpp / "gguf-py"))
    subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(work / "llama"), "--outtype", mode,
                    "--outfile", str(path)], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def quiet(fn):
    """fn(), its C library's lines to stderr discarded."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            return fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def ct2_folder(work, compute_type):
    import ctranslate2

    path = work / f"ct2-{compute_type}"
    if not (path / "model.bin").exists():
        quantization = None if compute_type == "float32" else compute_type
        ctranslate2.converters.TransformersConverter(str(work / "llama")).convert(
            str(path), quantization=quantization, force=True)
    return path


def find_llama_cpp(given):
    """An unpacked llama.cpp source tree holding convert_hf_to_gguf.py, or None."""
    candidates = [Path(given)] if given else []
    candidates += sorted(Path(DOWNLOADS).glob("llama_cpp_python-*/vendor/llama.cpp"))
    for candidate in candidates:
        if (candidate / "convert_hf_to_gguf.py").exists():
            return candidate
        inner = candidate / "vendor" / "llama.cpp"
        if (inner / "convert_hf_to_gguf.py").exists():
            return inner
    return None


# --- The engines, each in its own process -----------------------------------------------------


class Zoo:
    def __init__(self, work, precision, threads, backend):
        os.environ["KERAS_BACKEND"] = backend
        import zoo

        self.zoo = zoo
        self.lm = zoo.from_pretrained(str(work / "llama"), quantize=MODES["zoo-" + backend][precision])

    def __call__(self, prompts, new_tokens):
        out = self.zoo.generate(self.lm, prompts, max_new_tokens=new_tokens, stop_token_ids=None)
        return sum(len(s) for s in out.sequences)  # the new tokens of each sequence


class LlamaCpp:
    def __init__(self, work, precision, threads, llama_cpp):
        import llama_cpp as lcpp

        self.llm = lcpp.Llama(model_path=str(gguf_file(work, llama_cpp, MODES["llama.cpp"][precision])),
                              n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)

    def __call__(self, prompts, new_tokens):
        if len(prompts) != 1:
            raise NotImplementedError("llama-cpp-python's Llama decodes one sequence at a time")
        self.llm.reset()  # no prompt prefix kept from the last call
        count = 0
        for _ in self.llm.generate(prompts[0], top_k=1, temp=0.0, reset=False):
            count += 1
            if count == new_tokens:
                break
        return count


class CTranslate2:
    def __init__(self, work, precision, threads):
        import ctranslate2

        path = ct2_folder(work, MODES["ctranslate2"][precision])
        self.generator = ctranslate2.Generator(str(path), device="cpu", compute_type=MODES["ctranslate2"][precision],
                                               intra_threads=threads, inter_threads=1)
        self.vocabulary = json.loads((path / "vocabulary.json").read_text())

    def __call__(self, prompts, new_tokens):
        tokens = [[self.vocabulary[i] for i in p] for p in prompts]
        results = self.generator.generate_batch(tokens, max_length=new_tokens, min_length=new_tokens, sampling_topk=1,
                                                include_prompt_in_result=False)
        return sum(len(r.sequences_ids[0]) for r in results)


class Transformers:
    def __init__(self, work, precision, threads):
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(str(work / "llama"), dtype=torch.float32).eval()
        if precision == "int8":
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)

    def __call__(self, prompts, new_tokens):
        ids = self.torch.tensor(prompts)
        with self.torch.inference_mode():
            out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids), max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, do_sample=False, num_beams=1, pad_token_id=0)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0]


def worker(connection, engine, work, precision, threads, llama_cpp):
    """Loads one engine and answers ("run", prompts, new_tokens) with (seconds, new tokens)."""
    os.environ.update(OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="3", TF_NUM_INTRAOP_THREADS=str(threads))
    try:
        if engine.startswith("zoo-"):
            runner = Zoo(work, precision, threads, engine.removeprefix("zoo-"))
        elif engine == "llama.cpp":
            runner = LlamaCpp(work, precision, threads, llama_cpp)
        elif engine == "ctranslate2":
            runner = CTranslate2(work, precision, threads)
        else:
            runner = Transformers(work, precision, threads)
        connection.send(("ready", None))
    except Exception as error:  # named in the table, the other engines go on
        connection.send(("failed", f"{type(error).__name__}: {error}".splitlines()[0][:150]))
        return
    while True:
        message = connection.recv()
        if message is None:
            return
        _, prompts, new_tokens = message
        try:
            start = time.perf_counter()
            count = runner(prompts, new_tokens)
            connection.send(("done", (time.perf_counter() - start, count)))
        except Exception as error:
            connection.send(("failed", f"{type(error).__name__}: {error}".splitlines()[0][:150]))
            traceback.print_exc()


def available(engine):
    """None if the engine's package imports, else why not."""
    module = {"llama.cpp": "llama_cpp", "ctranslate2": "ctranslate2", "transformers": "torch"}.get(engine)
    if engine == "zoo-jax":
        module = "jax"
    if module is None:
        return None
    import importlib.util

    return None if importlib.util.find_spec(module) else f"not installed ({module}; pip install 'zoo[bench]')"


# --- The run ---------------------------------------------------------------------------------------


def bandwidth(megabytes=512, repeats=5):
    """Bytes a second of a large NumPy copy (read and write)."""
    import numpy as np

    src = np.ones(megabytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def weights_read_per_token():
    """Weights read per decoded token: every matrix, the tied table once (the head; the lookup reads one row)."""
    c = SMOLLM2_135M
    width, heads, kv, ff = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    head_dim = width // heads
    attention = 2 * width * width + 2 * width * kv * head_dim
    return c["num_hidden_layers"] * (attention + 3 * width * ff) + c["vocab_size"] * width


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default=",".join(ENGINES), help="(default: %(default)s)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="(default: %(default)s)")
    parser.add_argument("--batches", default="1", help="comma-separated batch sizes (default %(default)s; full: 1,8)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens a call (default %(default)s; full: 128)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="timed calls per engine after the first (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every engine (default %(default)s)")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "zoo_cpu_engines",
                        help="where the checkpoint and its conversions are kept (default %(default)s)")
    parser.add_argument("--llama-cpp", metavar="DIR", help="llama.cpp source tree with convert_hf_to_gguf.py")
    args = parser.parse_args()
    engines, precisions = args.engines.split(","), args.precisions.split(",")
    for engine in engines:
        if engine not in ENGINES:
            parser.error(f"--engines: {engine!r} is not an engine; expected some of {', '.join(ENGINES)}")
    for precision in precisions:
        if precision not in PRECISIONS:
            parser.error(f"--precisions: {precision!r} is not a precision; expected some of {', '.join(PRECISIONS)}")
    batches = [int(b) for b in args.batches.split(",")]

    skipped = {e: why for e in engines if (why := available(e))}
    llama_cpp = find_llama_cpp(args.llama_cpp) if "llama.cpp" in engines else None
    if "llama.cpp" in engines and "llama.cpp" not in skipped and llama_cpp is None:
        skipped["llama.cpp"] = "no convert_hf_to_gguf.py (pass --llama-cpp DIR, a llama.cpp source tree)"
    engines = [e for e in engines if e not in skipped]
    for engine, why in skipped.items():
        print(f"{engine}: {why}")
    args.work.mkdir(parents=True, exist_ok=True)
    prepare(args.work, llama_cpp, engines, precisions)
    limit_bw = bandwidth()
    weights = weights_read_per_token()
    print(f"SmolLM2-135M's Llama, random weights; greedy, prompt {args.prompt}, {args.new_tokens} new tokens; "
          f"{args.threads} threads each; {os.cpu_count()} CPUs; median of {args.rounds} calls after the first; "
          f"NumPy copy bandwidth {limit_bw / 1e9:.1f} GB/s")
    print(f"{'precision':<10}{'batch':>6}  {'engine':<16}{'mode':<15}{'first call':>11}{'new tok/s':>11}"
          f"{'zoo-tf ÷':>10}{'of limit':>10}")

    import numpy as np

    rng = np.random.default_rng(0)
    context = multiprocessing.get_context("spawn")
    for precision in precisions:
        runnable = [e for e in engines if precision in MODES[e]]
        workers = {}
        for engine in runnable:
            parent, child = context.Pipe()
            process = context.Process(
                target=worker, args=(child, engine, args.work, precision, args.threads, llama_cpp), daemon=True)
            process.start()
            workers[engine] = (parent, process)
        status = {e: workers[e][0].recv() for e in runnable}  # loading, all engines at once
        for batch in batches:
            prompts = rng.integers(3, SMOLLM2_135M["vocab_size"], (batch, args.prompt)).tolist()
            times, first, counts = {e: [] for e in runnable}, {}, {}
            why = {e: status[e][1] for e in runnable if status[e][0] == "failed"}  # not loaded: no batch runs
            for round_ in range(args.rounds + 1):
                for engine in runnable:
                    if engine in why:
                        continue
                    workers[engine][0].send(("run", prompts, args.new_tokens))
                    kind, value = workers[engine][0].recv()
                    if kind == "failed":
                        why[engine] = value
                    elif round_ == 0:
                        first[engine], counts[engine] = value
                    else:
                        times[engine].append(value[0])
            rates = {e: counts[e] / statistics.median(times[e]) for e in runnable if e not in why}
            for engine in runnable:
                mode = MODES[engine][precision] or precision
                if engine in why:
                    print(f"{precision:<10}{batch:>6}  {engine:<16}{mode:<15}  not run: {why[engine]}", flush=True)
                    continue
                ratio = f"{rates['zoo-tensorflow'] / rates[engine]:.2f}" if "zoo-tensorflow" in rates else "-"
                limit = f"{rates[engine] * weights * BYTES_PER_WEIGHT[precision] / limit_bw:.0%}" if batch == 1 else "-"
                print(f"{precision:<10}{batch:>6}  {engine:<16}{mode:<15}{first[engine]:>10.2f}s{rates[engine]:>11.1f}"
                      f"{ratio:>10}{limit:>10}", flush=True)
        for parent, process in workers.values():
            try:
                parent.send(None)
            except (BrokenPipeError, OSError):
                pass
            process.join(timeout=30)
    print("zoo-tf ÷: the zoo on TensorFlow's new tokens/s over the engine's; of limit: new tokens/s over "
          "the NumPy copy bandwidth / the weight bytes read per token (batch 1)")


if __name__ == "__main__":
    main()
