"""Presets are data: a dict of constructor arguments per name.

Sizes follow the papers and the published checkpoints:
- transformer-base / -big: Vaswani et al. 2017, Table 3 (N=6, d=512,
  d_ff=2048, h=8 / d=1024, d_ff=4096, h=16), a shared 37,000-token BPE
  vocabulary with shared, tied embeddings.
- gpt2-small / -medium: Radford et al. 2019 (vocabulary 50,257, context 1024).
- bert-base / -large: Devlin et al. 2019 (WordPiece vocabulary 30,522).
- tiny presets for tests, recipes and CPUs.
"""

PRESETS = {
    # --- Encoder-decoder ---------------------------------------------------
    "transformer-base": {
        "family": "transformer",
        "description": "Vaswani et al. 2017 base model (Table 3): N=6, d=512, d_ff=2048, h=8.",
        "config": dict(vocabulary_size=37000, num_layers=6, num_heads=8, hidden_dim=512,
                       intermediate_dim=2048, max_sequence_length=256, dropout=0.1),
    },
    "transformer-big": {
        "family": "transformer",
        "description": "Vaswani et al. 2017 big model (Table 3): N=6, d=1024, d_ff=4096, h=16.",
        "config": dict(vocabulary_size=37000, num_layers=6, num_heads=16, hidden_dim=1024,
                       intermediate_dim=4096, max_sequence_length=256, dropout=0.3),
    },
    "transformer-small": {
        "family": "transformer",
        "description": "A small translation model for Multi30k on a CPU: 3+3 layers, d=256, h=8.",
        "config": dict(vocabulary_size=8000, num_layers=3, num_heads=8, hidden_dim=256,
                       intermediate_dim=1024, max_sequence_length=64, dropout=0.1),
    },
    "transformer-tiny": {
        "family": "transformer",
        "description": "Tests and the synthetic demo: 2+2 layers, d=64, h=4.",
        "config": dict(vocabulary_size=1000, num_layers=2, num_heads=4, hidden_dim=64,
                       intermediate_dim=128, max_sequence_length=32, dropout=0.0),
    },
    # --- Decoder-only --------------------------------------------------------
    "gpt2-small": {
        "family": "gpt",
        "description": "GPT-2 124M: 12 layers, d=768, h=12, context 1024.",
        "config": dict(vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
                       intermediate_dim=3072, max_sequence_length=1024, dropout=0.1),
    },
    "gpt2-medium": {
        "family": "gpt",
        "description": "GPT-2 355M: 24 layers, d=1024, h=16, context 1024.",
        "config": dict(vocabulary_size=50257, num_layers=24, num_heads=16, hidden_dim=1024,
                       intermediate_dim=4096, max_sequence_length=1024, dropout=0.1),
    },
    "gpt1": {
        "family": "gpt",
        "description": "GPT-1 (post-LN): 12 layers, d=768, h=12, context 512, vocabulary 40,478.",
        "config": dict(vocabulary_size=40478, num_layers=12, num_heads=12, hidden_dim=768,
                       intermediate_dim=3072, max_sequence_length=512, dropout=0.1,
                       norm_first=False, activation="gelu"),
    },
    "gpt-baby": {
        "family": "gpt",
        "description": "nanoGPT's CPU 'baby GPT' for characters: 4 layers, d=128, h=4, block 64.",
        "config": dict(vocabulary_size=65, num_layers=4, num_heads=4, hidden_dim=128,
                       intermediate_dim=512, max_sequence_length=64, dropout=0.0),
    },
    "gpt-nano": {
        "family": "gpt",
        "description": "Tests: 2 layers, d=32, h=4, context 32 (minGPT's gpt-nano width was 48).",
        "config": dict(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32,
                       intermediate_dim=64, max_sequence_length=32, dropout=0.0),
    },
    # --- Encoder-only --------------------------------------------------------
    "bert-base": {
        "family": "bert",
        "description": "BERT-base 110M: 12 layers, d=768, h=12, vocabulary 30,522.",
        "config": dict(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                       intermediate_dim=3072, max_sequence_length=512, dropout=0.1),
    },
    "bert-large": {
        "family": "bert",
        "description": "BERT-large 340M: 24 layers, d=1024, h=16, vocabulary 30,522.",
        "config": dict(vocabulary_size=30522, num_layers=24, num_heads=16, hidden_dim=1024,
                       intermediate_dim=4096, max_sequence_length=512, dropout=0.1),
    },
    "bert-small": {
        "family": "bert",
        "description": "SST-2 on a CPU: 4 layers, d=256, h=4, sequence 64.",
        "config": dict(vocabulary_size=8000, num_layers=4, num_heads=4, hidden_dim=256,
                       intermediate_dim=1024, max_sequence_length=64, dropout=0.1),
    },
    "bert-tiny": {
        "family": "bert",
        "description": "Tests: 2 layers, d=32, h=4, sequence 32.",
        "config": dict(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32,
                       intermediate_dim=64, max_sequence_length=32, dropout=0.0),
    },
}
