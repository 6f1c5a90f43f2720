"""Presets are data: a dict of constructor arguments per name.

Sizes follow the papers and the published checkpoints:
- transformer-base / -big: Vaswani et al. 2017, Table 3 (N=6, d=512,
  d_ff=2048, h=8 / d=1024, d_ff=4096, h=16), a shared 37,000-token BPE
  vocabulary with shared, tied embeddings.
- gpt2-small / -medium: Radford et al. 2019 (vocabulary 50,257, context 1024).
- bert-base / -large: Devlin et al. 2019 (WordPiece vocabulary 30,522).
- smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b, tinyllama-1.1b,
  gemma3-270m:
  the shapes of the published checkpoints' config.json (weights come from
  `zoo.from_pretrained` on their folders).
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
    # --- Decoder-only, today's variants (RMSNorm, rotary, GQA, SwiGLU) ------
    "smollm2-135m": {
        "family": "llama",
        "description": "SmolLM2 135M: 30 layers, d=576, 9 heads, 3 key/value heads, tied, context 8192.",
        "config": dict(vocabulary_size=49152, num_layers=30, num_heads=9, hidden_dim=576, intermediate_dim=1536,
                       num_key_value_heads=3, max_sequence_length=8192, rope_theta=100000.0,
                       layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    },
    "qwen2.5-0.5b": {
        "family": "llama",
        "description": "Qwen2.5 0.5B: 24 layers, d=896, 14 heads, 2 key/value heads, Q/K/V biases, tied.",
        "config": dict(vocabulary_size=151936, num_layers=24, num_heads=14, hidden_dim=896, intermediate_dim=4864,
                       num_key_value_heads=2, max_sequence_length=32768, rope_theta=1000000.0,
                       layer_norm_epsilon=1e-6, tie_word_embeddings=True, attention_bias=True),
    },
    "qwen3-0.6b": {
        "family": "llama",
        "description": "Qwen3 0.6B: 28 layers, d=1024, 16 heads of 128, 8 key/value heads, query/key norm, tied.",
        "config": dict(vocabulary_size=151936, num_layers=28, num_heads=16, hidden_dim=1024, intermediate_dim=3072,
                       num_key_value_heads=8, head_dim=128, max_sequence_length=40960, rope_theta=1000000.0,
                       layer_norm_epsilon=1e-6, tie_word_embeddings=True, query_key_norm=True),
    },
    "llama-3.2-1b": {
        "family": "llama",
        "description": "Llama 3.2 1B: 16 layers, d=2048, 32 heads, 8 key/value heads, Llama 3 rope scaling, tied.",
        "config": dict(vocabulary_size=128256, num_layers=16, num_heads=32, hidden_dim=2048, intermediate_dim=8192,
                       num_key_value_heads=8, max_sequence_length=131072, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=8192),
                       layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    },
    "tinyllama-1.1b": {
        "family": "llama",
        "description": "TinyLlama 1.1B: 22 layers, d=2048, 32 heads, 4 key/value heads, untied head, context 2048.",
        "config": dict(vocabulary_size=32000, num_layers=22, num_heads=32, hidden_dim=2048, intermediate_dim=5632,
                       num_key_value_heads=4, max_sequence_length=2048, rope_theta=10000.0,
                       layer_norm_epsilon=1e-5, tie_word_embeddings=False),
    },
    "llama-baby": {
        "family": "llama",
        "description": "gpt-baby's size with the Llama block, for characters: 4 layers, d=128, h=4, SwiGLU 344, 800k parameters.",
        "config": dict(vocabulary_size=65, num_layers=4, num_heads=4, hidden_dim=128, intermediate_dim=344,
                       max_sequence_length=64, rope_theta=10000.0),
    },
    "llama-nano": {
        "family": "llama",
        "description": "Tests: 2 layers, d=32, 4 heads, 2 key/value heads, context 32.",
        "config": dict(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
                       num_key_value_heads=2, max_sequence_length=32),
    },
    # --- Decoder-only, Gemma 3 (sandwich norms, GeGLU, local and global layers)
    "gemma3-270m": {
        "family": "gemma",
        "description": "Gemma 3 270M: 18 layers, d=640, 4 heads of 256, 1 key/value head, 5 local (window 512) "
                       "to 1 global, vocabulary 262,144, tied.",
        "config": dict(vocabulary_size=262144, num_layers=18, num_heads=4, hidden_dim=640, intermediate_dim=2048,
                       num_key_value_heads=1, head_dim=256, max_sequence_length=32768, rope_theta=1000000.0,
                       local_rope_theta=10000.0, sliding_window=512, query_pre_attention_scalar=256,
                       layer_norm_epsilon=1e-6),
    },
    "gemma3-nano": {
        "family": "gemma",
        "description": "Tests: 6 layers (5 local with window 8, 1 global), d=32, 4 heads of 16, 1 key/value head.",
        "config": dict(vocabulary_size=100, num_layers=6, num_heads=4, hidden_dim=32, intermediate_dim=64,
                       num_key_value_heads=1, head_dim=16, max_sequence_length=64, sliding_window=8),
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
