"""Beam-4 translation beside CTranslate2 and transformers, at the same
precision and threads, called in turn in one run.

    python benchmarks/deployment/cpu_translation.py                     # float32 and int8, batch 1 and 8
    python benchmarks/deployment/cpu_translation.py --engines zoo-jax,ctranslate2 --precisions int8

The model: a Marian of opus-mt's base shape (6 + 6 layers, width 512, 8
heads, feed-forward 2048, vocabulary 58,101, shared embeddings) with
random weights (seed 0), saved once with transformers' `save_pretrained`
into `--work`, with SentencePiece models trained on Tiny Shakespeare and
a vocab.json filled to the vocabulary's size. Each engine loads that
folder its own way:

- zoo-tensorflow, zoo-jax: `zoo.from_pretrained(folder, quantize=...)`,
  `zoo.generation.beam_search` (4 beams);
- ctranslate2: `TransformersConverter` (float32; int8 weights with int8
  activations), `Translator.translate_batch(beam_size=4)`;
- transformers: `MarianMTModel` on torch's CPU (int8: `quantize_dynamic`
  of the Linear layers), `generate(num_beams=4)`.

Every engine is given the same token ids: `--sentences` sources of 10-16
random tokens and `</s>`, translated `--batch` at a time, each to exactly
`--new-tokens` tokens (random weights would stop anywhere: each engine's
minimum length keeps the end token out until then). Each engine runs in
its own process with `--threads` threads; per precision and batch size
the engines are called in turn, the first call (compiling included) is
reported on its own, and the figure is the median of `--rounds` calls
after it, in sentences per second.
"""

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ENGINES = ("zoo-tensorflow", "zoo-jax", "ctranslate2", "transformers")
PRECISIONS = ("float32", "int8")
MODES = {
    "zoo-tensorflow": {"float32": None, "int8": "int8"},
    "zoo-jax": {"float32": None, "int8": "int8"},
    "ctranslate2": {"float32": "float32", "int8": "int8"},
    "transformers": {"float32": "float32", "int8": "qint8 dynamic"},
}
OPUS_MT_BASE = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                    max_position_embeddings=512, activation_function="swish", scale_embedding=True,
                    static_position_embeddings=True, share_encoder_decoder_embeddings=True, pad_token_id=58100,
                    eos_token_id=0, bos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0,
                    num_beams=4, max_length=512)
BEAMS = 4
TINY_SHAKESPEARE = Path(os.environ.get("ZOO_DATA", "data")) / "tinyshakespeare" / "input.txt"


def write_marian_folder(folder):
    """opus-mt base's shape with random weights, its tokenizer files as transformers writes them."""
    import sentencepiece
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder.with_name(folder.name + "-spm")  # the files MarianTokenizer is made from
    scratch.mkdir(exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        input=str(TINY_SHAKESPEARE), model_prefix=str(scratch / "source"), vocab_size=4000, model_type="unigram",
        minloglevel=2)
    vocabulary = {"</s>": 0, "<unk>": 1}
    for line in (scratch / "source.vocab").read_text(encoding="utf-8").splitlines():
        vocabulary.setdefault(line.split("\t")[0], len(vocabulary))
    vocabulary.pop("<s>", None)
    while len(vocabulary) < OPUS_MT_BASE["vocab_size"] - 1:  # filled to opus-mt's size, <pad> last
        vocabulary[f"<extra_{len(vocabulary)}>"] = len(vocabulary)
    vocabulary["<pad>"] = len(vocabulary)
    vocabulary = {piece: i for i, piece in enumerate(vocabulary)}
    (scratch / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(str(scratch / "source.model"), str(scratch / "source.model"),
                                             str(scratch / "vocab.json"), source_lang="de", target_lang="en")
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT_BASE))
    model.save_pretrained(str(folder))


def ct2_folder(work, compute_type):
    import ctranslate2

    path = work / f"ct2-marian-{compute_type}"
    if not (path / "model.bin").exists():
        quantization = None if compute_type == "float32" else compute_type
        ctranslate2.converters.TransformersConverter(str(work / "marian")).convert(
            str(path), quantization=quantization, force=True)
    return path


class Zoo:
    def __init__(self, work, precision, threads, backend):
        os.environ["KERAS_BACKEND"] = backend
        import zoo
        from zoo.generation import beam_search

        self.beam_search = beam_search
        self.model = zoo.from_pretrained(str(work / "marian"), quantize=MODES["zoo-" + backend][precision])

    def __call__(self, sources, new_tokens):
        start = [[OPUS_MT_BASE["decoder_start_token_id"]]] * len(sources)
        out = self.beam_search(self.model, start, new_tokens, BEAMS, 1.0, [OPUS_MT_BASE["eos_token_id"]],
                               source=sources, min_new_tokens=new_tokens,
                               suppress_token_ids=[OPUS_MT_BASE["pad_token_id"]])
        return [len(row[0]) for row in out.sequences]  # the new tokens of each best hypothesis


class CTranslate2:
    def __init__(self, work, precision, threads):
        import ctranslate2

        path = ct2_folder(work, MODES["ctranslate2"][precision])
        self.translator = ctranslate2.Translator(str(path), device="cpu", compute_type=MODES["ctranslate2"][precision],
                                                 intra_threads=threads, inter_threads=1)
        self.pieces = json.loads((path / "shared_vocabulary.json").read_text(encoding="utf-8"))

    def __call__(self, sources, new_tokens):
        tokens = [[self.pieces[i] for i in source] for source in sources]
        results = self.translator.translate_batch(tokens, beam_size=BEAMS, length_penalty=1.0,
                                                  max_decoding_length=new_tokens, min_decoding_length=new_tokens)
        return [len(r.hypotheses[0]) for r in results]


class Transformers:
    def __init__(self, work, precision, threads):
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = transformers.MarianMTModel.from_pretrained(str(work / "marian"), dtype=torch.float32).eval()
        if precision == "int8":
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)

    def __call__(self, sources, new_tokens):
        pad = OPUS_MT_BASE["pad_token_id"]
        width = max(map(len, sources))
        ids = self.torch.tensor([s + [pad] * (width - len(s)) for s in sources])
        with self.torch.inference_mode():
            out = self.model.generate(ids, attention_mask=(ids != pad).long(), num_beams=BEAMS, length_penalty=1.0,
                                      max_new_tokens=new_tokens, min_new_tokens=new_tokens, early_stopping=False)
        return [int((row != pad).sum()) for row in out]  # the decoder start is pad


def worker(connection, engine, work, precision, threads):
    """Loads one engine and answers ("run", sources, new_tokens) with (seconds, new tokens per sentence)."""
    os.environ.update(OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="3", TF_NUM_INTRAOP_THREADS=str(threads))
    try:
        if engine.startswith("zoo-"):
            runner = Zoo(work, precision, threads, engine.removeprefix("zoo-"))
        elif engine == "ctranslate2":
            runner = CTranslate2(work, precision, threads)
        else:
            runner = Transformers(work, precision, threads)
        connection.send(("ready", None))
    except Exception as error:  # named in the table, the other engines go on
        connection.send(("failed", f"{type(error).__name__}: {error}".splitlines()[0][:150]))
        return
    while (message := connection.recv()) is not None:
        _, batches, new_tokens = message
        try:
            start, lengths = time.perf_counter(), []
            for sources in batches:
                lengths += runner(sources, new_tokens)
            connection.send(("done", (time.perf_counter() - start, lengths)))
        except Exception as error:
            connection.send(("failed", f"{type(error).__name__}: {error}".splitlines()[0][:150]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default=",".join(ENGINES), help="(default: %(default)s)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="(default: %(default)s)")
    parser.add_argument("--batches", default="1,8", help="sentences a call (default %(default)s)")
    parser.add_argument("--sentences", type=int, default=16, help="sentences translated per round (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens of each translation (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds after the first (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every engine (default %(default)s)")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "zoo_cpu_engines",
                        help="where the checkpoint and its conversions are kept (default %(default)s)")
    args = parser.parse_args()
    engines, precisions = args.engines.split(","), args.precisions.split(",")
    for name, given, known in (("--engines", engines, ENGINES), ("--precisions", precisions, PRECISIONS)):
        for value in given:
            if value not in known:
                parser.error(f"{name}: {value!r} is not one; expected some of {', '.join(known)}")
    batches = [int(b) for b in args.batches.split(",")]
    if not (args.work / "marian" / "model.safetensors").exists():
        write_marian_folder(args.work / "marian")
    if "ctranslate2" in engines:
        for precision in precisions:
            ct2_folder(args.work, MODES["ctranslate2"][precision])

    import numpy as np

    rng = np.random.default_rng(0)
    sources = [rng.integers(2, 58000, rng.integers(10, 17)).tolist() + [0] for _ in range(args.sentences)]
    print(f"opus-mt base's Marian, random weights; {BEAMS} beams, {args.sentences} sources of 11-17 tokens, "
          f"{args.new_tokens} new tokens each; {args.threads} threads each; {os.cpu_count()} CPUs; "
          f"median of {args.rounds} rounds after the first")
    print(f"{'precision':<10}{'batch':>6}  {'engine':<16}{'mode':<15}{'first round':>12}{'sentences/s':>13}{'zoo-tf ÷':>10}")
    context = multiprocessing.get_context("spawn")
    for precision in precisions:
        workers = {}
        for engine in engines:
            parent, child = context.Pipe()
            process = context.Process(target=worker, args=(child, engine, args.work, precision, args.threads),
                                      daemon=True)
            process.start()
            workers[engine] = (parent, process)
        why = {e: value for e in engines if (value := workers[e][0].recv())[0] == "failed"}
        why = {e: value[1] for e, value in why.items()}
        for batch in batches:
            chunks = [sources[i : i + batch] for i in range(0, len(sources), batch)]
            times, first = {e: [] for e in engines}, {}
            failed = dict(why)
            for round_ in range(args.rounds + 1):
                for engine in engines:
                    if engine in failed:
                        continue
                    workers[engine][0].send(("run", chunks, args.new_tokens))
                    kind, value = workers[engine][0].recv()
                    if kind == "failed":
                        failed[engine] = value
                    elif set(value[1]) != {args.new_tokens}:
                        failed[engine] = f"translations of {sorted(set(value[1]))} tokens, not {args.new_tokens}"
                    elif round_ == 0:
                        first[engine] = value[0]
                    else:
                        times[engine].append(value[0])
            rates = {e: len(sources) / statistics.median(times[e]) for e in engines if e not in failed}
            for engine in engines:
                mode = MODES[engine][precision] or precision
                if engine in failed:
                    print(f"{precision:<10}{batch:>6}  {engine:<16}{mode:<15}  not run: {failed[engine]}", flush=True)
                    continue
                ratio = f"{rates['zoo-tensorflow'] / rates[engine]:.2f}" if "zoo-tensorflow" in rates else "-"
                print(f"{precision:<10}{batch:>6}  {engine:<16}{mode:<15}{first[engine]:>11.2f}s{rates[engine]:>13.2f}"
                      f"{ratio:>10}", flush=True)
        for parent, process in workers.values():
            try:
                parent.send(None)
            except (BrokenPipeError, OSError):
                pass
            process.join(timeout=30)
    print("zoo-tf ÷: the zoo on TensorFlow's sentences/s over the engine's")


if __name__ == "__main__":
    sys.exit(main())
