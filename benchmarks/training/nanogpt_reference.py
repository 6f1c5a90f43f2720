"""nanoGPT's CPU "baby GPT" in PyTorch, the reference for `recipes.gpt_char`.

    pip install torch==2.13.0     # not a zoo dependency; any recent CPU build
    python benchmarks/training/nanogpt_reference.py --seeds 1337 1 2 3 4

A re-typing of nanoGPT's `model.py` and `train.py` at the settings of its
README's CPU example (`config/train_shakespeare_char.py --device=cpu
--compile=False --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
--n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`): no
biases (`bias=False`), LayerNorm eps 1e-5, exact GELU, tied token embedding
and head, N(0, 0.02) initialisation with the residual projections at
0.02 / sqrt(2 L), AdamW(0.9, 0.99) with weight decay 0.1 on every tensor of
rank >= 2, lr 1e-3 with 100 warm-up steps and cosine decay to 1e-4,
gradient clipping at global norm 1.0, random windows of the first 90%.

It prints, per seed, the training time and the validation loss estimated
the zoo's way (200 random batches of the last 10%; nanoGPT's README figure
comes from its `--eval_iters=20`, printed alongside), so the two can be
compared seed for seed. The project never imports this file.
"""

import argparse
import math
import os
import time

import numpy as np

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared", "data", "tinyshakespeare", "input.txt"
)
BATCH, BLOCK, LAYERS, HEADS, WIDTH = 12, 64, 4, 4, 128
STEPS, WARMUP, LR, MIN_LR = 2000, 100, 1e-3, 1e-4


def build(vocabulary_size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LayerNorm(nn.Module):  # nanoGPT's, with bias=False
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(WIDTH))

        def forward(self, x):
            return F.layer_norm(x, (WIDTH,), self.weight, None, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
            self.c_proj = nn.Linear(WIDTH, WIDTH, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(WIDTH, dim=2)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
            self.c_proj = nn.Linear(4 * WIDTH, WIDTH, bias=False)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(), CausalSelfAttention(), LayerNorm(), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocabulary_size, WIDTH)
            self.wpe = nn.Embedding(BLOCK, WIDTH)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = LayerNorm()
            self.lm_head = nn.Linear(WIDTH, vocabulary_size, bias=False)
            self.wte.weight = self.lm_head.weight  # weight tying
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, 0.0, 0.02)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * LAYERS))

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def learning_rate(step):
    """nanoGPT's get_lr."""
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = min((step - WARMUP) / (STEPS - WARMUP), 1.0)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def run(text, seed, eval_batches):
    import torch

    torch.manual_seed(seed)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], dtype=np.int64)
    n = int(0.9 * len(data))
    train, val = torch.from_numpy(data[:n]), torch.from_numpy(data[n:])

    def get_batch(split):
        ix = torch.randint(len(split) - BLOCK, (BATCH,))
        x = torch.stack([split[i : i + BLOCK] for i in ix])
        y = torch.stack([split[i + 1 : i + 1 + BLOCK] for i in ix])
        return x, y

    model = build(len(chars))
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(0.9, 0.99),
    )
    start = time.perf_counter()
    for step in range(STEPS):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        loss = model(*get_batch(train))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        losses = [model(*get_batch(val)).item() for _ in range(eval_batches)]
    return seconds, float(np.mean(losses)), float(np.mean(losses[:20]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="Tiny Shakespeare's input.txt")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337])
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        parser.exit(1, "This reference needs PyTorch, which the zoo does not depend on: pip install torch\n")
    torch.set_num_threads(args.threads)
    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    results = []
    for seed in args.seeds:
        seconds, loss, loss20 = run(text, seed, args.eval_batches)
        results.append(loss)
        print(f"seed {seed}: trained 2000 steps in {seconds:.1f} s, val_loss {loss:.4f} "
              f"({args.eval_batches} batches; {loss20:.4f} over the first 20)", flush=True)
    print(f"val_loss={float(np.median(results)):.4f}")


if __name__ == "__main__":
    main()
