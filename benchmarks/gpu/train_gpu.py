"""GPT-2 small training speed on one GPU: the zoo, keras-hub and nanoGPT.

    python benchmarks/gpu/train_gpu.py                      # GPT-2 small, batch 16 x 1024, all three
    python benchmarks/gpu/train_gpu.py --impl zoo,torch     # some of them
    python benchmarks/gpu/train_gpu.py --layers 1 --seq 32 --batch 2 --steps 2 --warmup 1 \\
        --width 64 --heads 2 --vocab 128                # a smoke run (a CPU will do)

Every row trains the same model - GPT-2 small by default (12 layers, width
768, 12 heads, vocabulary 50257, context 1024, tied head), dropout 0 - on
random tokens with AdamW (lr 6e-4, weight decay 0.1, beta_2 0.95, gradient
norm clipped to 1.0) in bfloat16 mixed precision:

- zoo: `zoo.build("gpt2-small", task="causal_lm")` under `mixed_bfloat16`,
  `MaskedSparseCrossentropy` (no padding), `model.fit` with
  `jit_compile=True`; token ids only (no `padding_mask`: full windows).
- keras-hub: `GPT2Backbone` + `GPT2CausalLM` (no preprocessor), the same
  settings, `SparseCategoricalCrossentropy(from_logits=True)`, through
  `keras.Model.fit` (keras-hub's own `fit` wants tf.data or grain).
- nanoGPT: nanoGPT's model in PyTorch - flash
  `scaled_dot_product_attention(is_causal=True)`, fused AdamW, autocast
  bfloat16, `torch.compile` - when torch is installed (else the row is
  skipped with a note).

A zoo row may name levers after a `+`, each measured as a row of its own
in the same run (`--impl torch,zoo,zoo+pad,zoo+nocudnn`):

- `pad`: the vocabulary padded to a multiple of 128 (50257 -> 50304, as
  nanoGPT pads it); the labels stay below the real vocabulary size;
- `flash`: `flash_attention=True` on `keras.ops.dot_product_attention`, which
  fails the row if cuDNN's flash attention cannot run (by default Keras
  chooses it itself where it can);
- `nocudnn`: attention without the fused kernel (`flash_attention=False`), to
  see what cuDNN's flash attention is worth;
- `cublas`: `XLA_FLAGS=--xla_gpu_enable_triton_gemm=false` (every matrix
  product through cuBLAS, none through Triton);
- `lhs`: `XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true`;
- `gradonly`: the forward and backward pass only (`jax.value_and_grad` of the
  model and loss, no optimizer update, JAX only), to split the step into the
  model and the optimizer;
- `noclip`: AdamW without the global-norm clipping (what the clipping's
  reductions over every gradient cost);
- `nodecay`: Adam, no weight decay (the decay's pass over the weights);
- `sgd`: plain SGD, the cheapest update Keras has (what Keras' optimizer
  machinery costs apart from Adam's arithmetic);
- `chunked` (with `gradonly`): the loss from the final hidden states in 8
  slices of positions (128 each at GPT-2's 1024), each slice's logits made
  again in the backward pass (`jax.checkpoint`), so that the (B, T, V)
  logits never exist whole, against the bf16 logits with the float32
  log-sum-exp of the other rows;
- `flat`: the same AdamW as one elementwise pass over all the weights at once
  (`benchmarks/gpu/flat_adamw.py`), as PyTorch's fused AdamW does it, in place of
  Keras' variable-by-variable update.

`--profile` traces 3 more steps of each row after the timed ones and prints
the kernels per step, their time per step (against the step's: the rest is
the device waiting), the 5 kernels that take the most time, and for the
Keras rows on JAX the kernel time split into the forward pass, the backward
pass and the optimizer, read from the scopes of XLA's optimised program
(`benchmarks/gpu/kernel_profile.py`; `jax.profiler` for the Keras rows,
`torch.profiler` for nanoGPT, whose optimizer kernels are told by name).

Each runs in a fresh process of its own (`KERAS_BACKEND=jax` by default for
the Keras rows: `--backend`). After `--warmup` steps (compilation), `--steps`
steps are timed. Each row prints ms/step, tokens/s and the model FLOPs
utilisation as nanoGPT's `estimate_mfu` counts it: 6 N + 12 L T d FLOPs per
token (N without the position embeddings) against `--peak` TFLOP/s (989:
the dense bfloat16 peak of an H100 / H200). The last line is
`ratio zoo/nanoGPT tokens/s: N.NN`.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from kernel_profile import describe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPLS = ("zoo", "hub", "torch")
TITLES = {"zoo": "zoo", "hub": "keras-hub", "torch": "nanoGPT (PyTorch)"}
LEVERS = ("pad", "flash", "nocudnn", "cublas", "lhs", "gradonly", "noclip", "nodecay", "sgd", "flat", "chunked")
CHUNKS = 8  # the chunked lever's slices of the context (1024 -> 8 x 128 positions)
XLA_FLAGS = {
    "cublas": "--xla_gpu_enable_triton_gemm=false",
    "lhs": "--xla_gpu_enable_latency_hiding_scheduler=true",
}


def split_row(row):
    """'zoo+pad+cublas' -> ('zoo', ['pad', 'cublas'])."""
    impl, *levers = row.split("+")
    return impl, levers


def title(row):
    impl, levers = split_row(row)
    return " + ".join([TITLES[impl], *levers])


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default=",".join(IMPLS),
                        help="comma-separated rows, of zoo,hub,torch; a zoo row may add levers: zoo+pad+cublas "
                             f"(levers: {', '.join(LEVERS)}); default: zoo,hub,torch")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768, help="d_model; d_ff is 4x")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--seq", type=int, default=1024, help="tokens per row (the context)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    parser.add_argument("--peak", type=float, default=989.0, help="the device's dense bf16 TFLOP/s (H100/H200: 989)")
    parser.add_argument("--backend", default="jax", help="Keras backend of the zoo and keras-hub rows")
    parser.add_argument("--profile", action="store_true",
                        help="print each row's kernels per step, their time, the 5 with the most and (Keras rows) "
                             "the split into forward, backward and optimizer")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dump-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    impls = [name.strip() for name in args.impl.split(",") if name.strip()]
    if not impls:
        parser.error(f"--impl {args.impl}: expected a comma-separated list of {', '.join(IMPLS)}")
    for row in impls:
        impl, levers = split_row(row)
        if impl not in IMPLS:
            parser.error(f"--impl: unknown row {row!r}: expected {', '.join(IMPLS)}, a zoo row with levers after '+'")
        unknown = [lever for lever in levers if lever not in LEVERS]
        if unknown or (levers and impl != "zoo"):
            parser.error(f"--impl: {row!r}: levers go on zoo rows and are {', '.join(LEVERS)}")
        if "chunked" in levers and "gradonly" not in levers:
            parser.error(f"--impl: {row!r}: the chunked loss is measured without the optimizer: zoo+gradonly+chunked")
    for name in ("layers", "width", "heads", "vocab", "seq", "batch", "steps", "warmup"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name} {getattr(args, name)}: expected a positive number")
    if args.width % args.heads:
        parser.error(f"--width {args.width} is not a multiple of --heads {args.heads}")
    args.impls = impls
    return args


def random_tokens(args):
    """(warmup + steps, batch, seq + 1) token ids; inputs and next-token targets."""
    rng = np.random.default_rng(0)
    return rng.integers(0, args.vocab, size=(args.warmup + args.steps, args.batch, args.seq + 1), dtype=np.int32)


# --- Keras: the zoo and keras-hub ---------------------------------------------


def padded(vocabulary_size, multiple=128):
    return -(-vocabulary_size // multiple) * multiple


def keras_model(impl, levers, args):
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)  # the same first weights in every row: the first losses agree
    if "flash" in levers or "nocudnn" in levers:
        import functools

        keras.ops.dot_product_attention = functools.partial(
            keras.ops.dot_product_attention, flash_attention="flash" in levers
        )
    if impl == "zoo":
        import zoo
        from zoo.training import MaskedSparseCrossentropy

        model = zoo.build(
            "gpt2-small", task="causal_lm",
            vocabulary_size=padded(args.vocab) if "pad" in levers else args.vocab, num_layers=args.layers,
            num_heads=args.heads, hidden_dim=args.width, intermediate_dim=4 * args.width,
            max_sequence_length=args.seq, dropout=0.0,
        )
        loss = MaskedSparseCrossentropy(pad_id=-1)  # every label counts
    else:
        import keras_hub

        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=args.vocab, num_layers=args.layers, num_heads=args.heads, hidden_dim=args.width,
            intermediate_dim=4 * args.width, dropout=0.0, max_sequence_length=args.seq,
        )
        model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras_optimizer(levers)
    keras.Model.compile(model, optimizer=optimizer, loss=loss, jit_compile=True)
    return model, loss


def chunked_loss(model, hidden, labels, chunks):
    """The mean next-token cross-entropy of (B, T, d) final hidden states,
    its logits made `chunks` slices of positions at a time and made again
    in the backward pass (`jax.checkpoint`), so that the (B, T, V) logits
    never exist whole: float32 log-sum-exp minus the label's logit."""
    import jax
    import keras

    length = labels.shape[1]
    if length % chunks:
        raise SystemExit(f"the chunked lever splits --seq {length} into {chunks} equal slices: pick another --seq")
    size = length // chunks

    @jax.checkpoint
    def piece(h, y):  # (B, size, d), (B, size) -> the summed loss
        logits = keras.ops.cast(model.logits(h), "float32")  # (B, size, V)
        picked = keras.ops.take_along_axis(logits, keras.ops.expand_dims(y, -1), axis=-1)[..., 0]
        return keras.ops.sum(keras.ops.logsumexp(logits, axis=-1) - picked)

    total = sum(piece(hidden[:, i * size:(i + 1) * size], labels[:, i * size:(i + 1) * size]) for i in range(chunks))
    return total / (labels.shape[0] * length)


def keras_optimizer(levers):
    """nanoGPT's AdamW, or what the optimizer levers make of it."""
    import keras

    if "sgd" in levers:
        return keras.optimizers.SGD(6e-4)
    clipnorm = None if "noclip" in levers else 1.0
    if "flat" in levers:
        from flat_adamw import FlatAdamW

        return FlatAdamW(6e-4, weight_decay=0.1, beta_2=0.95, global_clipnorm=clipnorm)
    if "nodecay" in levers:
        return keras.optimizers.Adam(6e-4, beta_2=0.95, global_clipnorm=clipnorm)
    return keras.optimizers.AdamW(6e-4, weight_decay=0.1, beta_2=0.95, global_clipnorm=clipnorm)


def grad_only_step(model, loss, chunks=1):
    """A jitted forward and backward pass (JAX): the step without the
    optimizer; with `chunks` > 1, the loss of `chunked_loss`."""
    import jax
    import keras

    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss_of(trainable, x, y):
        if chunks == 1:
            logits, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            return loss(y, logits)
        mapping = [*zip(model.trainable_variables, trainable), *zip(model.non_trainable_variables, non_trainable)]
        with keras.StatelessScope(state_mapping=mapping):
            return chunked_loss(model, model.backbone(x, training=True), y, chunks)

    step = jax.jit(jax.value_and_grad(loss_of))
    state = {"trainable": [v.value for v in model.trainable_variables]}

    def fit(x, y, batch):
        for start in range(0, len(y), batch):
            value, grads = step(state["trainable"], {"token_ids": x["token_ids"][start:start + batch]},
                                y[start:start + batch])
        jax.block_until_ready(grads)
        return float(value)

    return fit


def keras_run(row, args, tokens):
    import keras

    impl, levers = split_row(row)
    model, loss = keras_model(impl, levers, args)

    def inputs_of(chunk):
        inputs = chunk[:, :, :-1].reshape(-1, args.seq)
        x = {"token_ids": inputs}
        if impl == "hub":  # keras-hub's backbone always takes a padding mask
            x["padding_mask"] = np.ones_like(inputs)
        return x, chunk[:, :, 1:].reshape(-1, args.seq)

    if "gradonly" in levers:
        if keras.backend.backend() != "jax":
            raise SystemExit("the gradonly lever needs KERAS_BACKEND=jax")
        step = grad_only_step(model, loss, chunks=CHUNKS if "chunked" in levers else 1)

        def fit(chunk):
            return step(*inputs_of(chunk), args.batch)
    else:
        def fit(chunk):
            """Train on chunk (steps, B, T + 1); the last loss, after the device is done."""
            x, y = inputs_of(chunk)
            history = keras.Model.fit(model, x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
            keras.ops.convert_to_numpy(model.trainable_variables[0].value)  # waits for the last step
            return history.history["loss"][-1]

    start = time.perf_counter()
    first = fit(tokens[: max(args.warmup, 1)])
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    last = fit(tokens[args.warmup:])
    result = dict(seconds=time.perf_counter() - start, warmup_seconds=warmup_seconds, first_loss=float(first),
                  last_loss=float(last), params=int(model.count_params()))
    if args.profile and keras.backend.backend() == "jax":
        import functools

        from kernel_profile import train_parts, trace_summary

        parts = functools.partial(train_parts, optimizer_scope=model.optimizer.name)
        result["profile"] = trace_summary(lambda: fit(tokens[-3:]), steps=3, dump_dir=args.dump_dir, parts=parts)
    return result


# --- nanoGPT in PyTorch --------------------------------------------------------


def torch_run(args, tokens):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True  # nanoGPT's setting
    torch.backends.cudnn.allow_tf32 = True
    d, h, vocab = args.width, args.heads, args.vocab

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))  # (B, h, T, k)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention on a GPU
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))  # (B, T, d)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(args.seq, d)
            self.h = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V), tied head
            return F.cross_entropy(logits.float().view(-1, vocab), targets.reshape(-1))

    torch.manual_seed(0)
    model = GPT().to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), fused=cuda,
    )
    compiled = torch.compile(model)
    data = torch.from_numpy(tokens.astype(np.int64)).to(device)

    def step(i):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = compiled(data[i, :, :-1], data[i, :, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    for i in range(max(args.warmup, 1)):
        first = step(i)
    first = first.item()
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        last = step(i)
    last = last.item()
    sync()
    result = dict(seconds=time.perf_counter() - start, warmup_seconds=warmup_seconds, first_loss=first,
                  last_loss=last, params=int(params))
    if args.profile and cuda:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(3):
                step(i)
            sync()
        result["profile"] = torch_summary(prof, steps=3)
    return result


def torch_summary(prof, steps, count=5):
    """`kernel_profile.summarize`'s dict for a `torch.profiler` run: its
    CUDA kernels, the fused AdamW's and the clipping's told by name."""
    from torch.autograd import DeviceType

    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    totals, parts = {}, {}
    for e in kernels:
        totals[e.name] = totals.get(e.name, 0.0) + e.device_time
        part = "optimizer" if any(word in e.name.lower() for word in ("adam", "multi_tensor")) else "model"
        parts[part] = parts.get(part, 0.0) + e.device_time / 1e3 / steps
    top = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return {"launches": len(kernels) / steps, "busy_ms": sum(e.device_time for e in kernels) / 1e3 / steps,
            "top": [(us / 1e3 / steps, name) for name, us in top], "parts": parts}


# --- The table -----------------------------------------------------------------


def flops_per_token(args, params):
    """nanoGPT's estimate_mfu: 6 N + 12 L T d, N without position embeddings."""
    return 6 * (params - args.seq * args.width) + 12 * args.layers * args.seq * args.width


def child(args):
    tokens = random_tokens(args)
    result = torch_run(args, tokens) if args.child == "torch" else keras_run(args.child, args, tokens)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(row, args, argv):
    """One row in a fresh process: its result dict, or why not."""
    impl, levers = split_row(row)
    if impl == "torch":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None, "skipped: PyTorch is not installed (pip install torch)"
    env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    flags = [XLA_FLAGS[lever] for lever in levers if lever in XLA_FLAGS]
    if flags:
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), *flags]))
    command = [sys.executable, os.path.abspath(__file__), *argv, "--child", row]
    if args.profile and impl != "torch":
        import tempfile

        from kernel_profile import dump_flags

        dump_dir = tempfile.mkdtemp(prefix="train_gpu_hlo_")  # names each kernel's part of the step
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), dump_flags(dump_dir)]))
        command += ["--dump-dir", dump_dir]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed (exit {done.returncode}): {tail}"
    return json.loads(lines[-1][len("RESULT "):]), None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.child:
        return child(args)
    tokens_per_step = args.batch * args.seq
    print(f"GPT: {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, "
          f"batch {args.batch} x {args.seq} tokens, bf16, AdamW; {args.warmup} + {args.steps} steps; "
          f"MFU against {args.peak:g} TFLOP/s; Keras rows on {args.backend}", flush=True)
    print(f"{'':28s} {'params':>13s} {'warm-up s':>9s} {'ms/step':>9s} {'tokens/s':>11s} {'MFU':>6s}  loss")
    speed = {}
    for row in args.impls:
        result, note = run_child(row, args, argv)
        if result is None:
            print(f"{title(row):28s} {note}", flush=True)
            continue
        ms = 1000 * result["seconds"] / args.steps
        speed[row] = tokens_per_step * args.steps / result["seconds"]
        mfu = speed[row] * flops_per_token(args, result["params"]) / (args.peak * 1e12)
        print(f"{title(row):28s} {result['params']:13,d} {result['warmup_seconds']:9.1f} {ms:9.1f} "
              f"{speed[row]:11,.0f} {100 * mfu:5.1f}%  {result['first_loss']:.3f} -> {result['last_loss']:.3f}",
              flush=True)
        profile = result.get("profile")
        if profile:
            for line in describe(profile):
                print(f"    {line}", flush=True)
            for ms_per_step, name in profile["top"]:
                print(f"    {ms_per_step:8.2f} ms/step  {name[:110]}", flush=True)
    if "torch" in speed:
        for row in speed:
            if row.startswith("zoo") and row != "zoo":
                print(f"ratio {title(row)}/nanoGPT tokens/s: {speed[row] / speed['torch']:.2f}")
    if "zoo" in speed and "torch" in speed:
        print(f"ratio zoo/nanoGPT tokens/s: {speed['zoo'] / speed['torch']:.2f}")
    else:
        missing = " and ".join(TITLES[i] for i in ("zoo", "torch") if i not in speed)
        print(f"ratio zoo/nanoGPT tokens/s: n/a (no {missing} row)")


if __name__ == "__main__":
    main()
