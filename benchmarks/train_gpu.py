"""GPT-2 small training speed on one GPU: the zoo, keras-hub and nanoGPT.

    python benchmarks/train_gpu.py                      # GPT-2 small, batch 16 x 1024, all three
    python benchmarks/train_gpu.py --impl zoo,torch     # some of them
    python benchmarks/train_gpu.py --layers 1 --seq 32 --batch 2 --steps 2 --warmup 1 \\
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPLS = ("zoo", "hub", "torch")
TITLES = {"zoo": "zoo", "hub": "keras-hub", "torch": "nanoGPT (PyTorch)"}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default=",".join(IMPLS), help="comma-separated, of zoo,hub,torch (default: all)")
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
    parser.add_argument("--child", choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    impls = [name.strip() for name in args.impl.split(",") if name.strip()]
    unknown = [name for name in impls if name not in IMPLS]
    if unknown or not impls:
        parser.error(f"--impl {args.impl}: expected a comma-separated list of {', '.join(IMPLS)}")
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


def keras_model(impl, args):
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    if impl == "zoo":
        import zoo
        from zoo.training import MaskedSparseCrossentropy

        model = zoo.build(
            "gpt2-small", task="causal_lm", vocabulary_size=args.vocab, num_layers=args.layers,
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
    optimizer = keras.optimizers.AdamW(6e-4, weight_decay=0.1, beta_2=0.95, global_clipnorm=1.0)
    keras.Model.compile(model, optimizer=optimizer, loss=loss, jit_compile=True)
    return model


def keras_run(impl, args, tokens):
    import keras

    model = keras_model(impl, args)

    def fit(chunk):
        """Train on chunk (steps, B, T + 1); the last loss, after the device is done."""
        inputs = chunk[:, :, :-1].reshape(-1, args.seq)
        x = {"token_ids": inputs}
        if impl == "hub":  # keras-hub's backbone always takes a padding mask
            x["padding_mask"] = np.ones_like(inputs)
        y = chunk[:, :, 1:].reshape(-1, args.seq)
        history = keras.Model.fit(model, x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
        keras.ops.convert_to_numpy(model.trainable_variables[0].value)  # waits for the last step
        return history.history["loss"][-1]

    start = time.perf_counter()
    first = fit(tokens[: max(args.warmup, 1)])
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    last = fit(tokens[args.warmup:])
    return dict(seconds=time.perf_counter() - start, warmup_seconds=warmup_seconds, first_loss=float(first),
                last_loss=float(last), params=int(model.count_params()))


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
    return dict(seconds=time.perf_counter() - start, warmup_seconds=warmup_seconds, first_loss=first,
                last_loss=last, params=int(params))


# --- The table -----------------------------------------------------------------


def flops_per_token(args, params):
    """nanoGPT's estimate_mfu: 6 N + 12 L T d, N without position embeddings."""
    return 6 * (params - args.seq * args.width) + 12 * args.layers * args.seq * args.width


def child(args):
    tokens = random_tokens(args)
    result = torch_run(args, tokens) if args.child == "torch" else keras_run(args.child, args, tokens)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(impl, args, argv):
    """One implementation in a fresh process: its result dict, or why not."""
    if impl == "torch":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None, "skipped: PyTorch is not installed (pip install torch)"
    env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    command = [sys.executable, os.path.abspath(__file__), *argv, "--child", impl]
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
    print(f"{'':20s} {'params':>13s} {'warm-up s':>9s} {'ms/step':>9s} {'tokens/s':>11s} {'MFU':>6s}  loss")
    speed = {}
    for impl in args.impls:
        result, note = run_child(impl, args, argv)
        if result is None:
            print(f"{TITLES[impl]:20s} {note}", flush=True)
            continue
        ms = 1000 * result["seconds"] / args.steps
        speed[impl] = tokens_per_step * args.steps / result["seconds"]
        mfu = speed[impl] * flops_per_token(args, result["params"]) / (args.peak * 1e12)
        print(f"{TITLES[impl]:20s} {result['params']:13,d} {result['warmup_seconds']:9.1f} {ms:9.1f} "
              f"{speed[impl]:11,.0f} {100 * mfu:5.1f}%  {result['first_loss']:.3f} -> {result['last_loss']:.3f}",
              flush=True)
    if "zoo" in speed and "torch" in speed:
        print(f"ratio zoo/nanoGPT tokens/s: {speed['zoo'] / speed['torch']:.2f}")
    else:
        missing = " and ".join(TITLES[i] for i in ("zoo", "torch") if i not in speed)
        print(f"ratio zoo/nanoGPT tokens/s: n/a (no {missing} row)")


if __name__ == "__main__":
    main()
