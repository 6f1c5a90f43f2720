"""Writes the folders of this directory with transformers itself (`save_pretrained`), as a user
of transformers >= 5 gets them, and what transformers computes on them (expected.json):

    pip install torch transformers sentencepiece
    python -m tests.checkpoints.saved_by_transformers.make

- t5-v1_1/: a tiny random T5 v1.1 (gated GELU, no output rescaling). transformers >= 5 writes
  `"tie_word_embeddings": true` and `"scale_decoder_outputs": false`; expected.json holds the
  logits of `T5ForConditionalGeneration` on fixed ids.
- marian-forced-eos-left-out/: a tiny random Marian whose generation config leaves
  `forced_eos_token_id` out while config.json keeps it (the generation config edited, then saved);
  expected.json holds the token ids `generate` gives, as the generation config says.

Only the files transformers writes are kept; a test adds the stand-ins' tokenizer files
(`tokenizer_files`, from tests/checkpoints/*_checkpoints.py), which are the same each time.
"""

import json
from pathlib import Path

import numpy as np

from tests.checkpoints import marian_checkpoints as mc
from tests.checkpoints import t5_checkpoints as tc

HERE = Path(__file__).parent
WRITTEN_BY_TRANSFORMERS = ("config.json", "generation_config.json", "model.safetensors")


def tokenizer_files(folder):
    """Adds the stand-ins' tokenizer files to a folder of this directory (a copy of it)."""
    if (folder / "config.json").is_file() and json.loads((folder / "config.json").read_text())["model_type"] == "t5":
        (folder / "spiece.model").write_bytes(tc.train_sentence_piece(tc.GERMAN + tc.ENGLISH, 90))
        tokenizer_config = {"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "eos_token": "</s>",
                            "unk_token": "<unk>", "pad_token": "<pad>", "extra_ids": tc.EXTRA_IDS}
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
        return folder
    written = {name: (folder / name).read_bytes() for name in WRITTEN_BY_TRANSFORMERS if (folder / name).is_file()}
    mc.hf_folder(folder)
    for name, content in written.items():
        (folder / name).write_bytes(content)
    return folder


def keep_only_what_transformers_wrote(folder):
    for path in folder.iterdir():
        if path.name not in WRITTEN_BY_TRANSFORMERS:
            path.unlink()


def t5_v1_1(folder):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    folder.mkdir(exist_ok=True)
    proto = tc.train_sentence_piece(tc.GERMAN + tc.ENGLISH, 90)
    vocabulary_size = tc.piece_count(proto) + tc.EXTRA_IDS + 8
    sizes = {k: v for k, v in tc.VERSIONS["v1.1"].items()}
    torch.manual_seed(0)
    config = T5Config(vocab_size=vocabulary_size, relative_attention_num_buckets=8,
                      relative_attention_max_distance=20, decoder_start_token_id=0, **sizes)
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # T5's own initialization is far from unit scale: spread the logits
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    rng = np.random.default_rng(0)
    source, target = rng.integers(2, vocabulary_size, (2, 7)), rng.integers(2, vocabulary_size, (2, 5))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(source), decoder_input_ids=torch.tensor(target)).logits
    return {"encoder_token_ids": source.tolist(), "decoder_token_ids": target.tolist(),
            "logits": logits.numpy().astype(float).round(6).tolist()}


def marian_forced_eos_left_out(folder):
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    mc.hf_folder(folder)  # the stand-in's tokenizer files; config and weights are written again below
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        (folder / name).unlink()
    settings = mc.config(len(json.loads((folder / "vocab.json").read_text(encoding="utf-8"))))
    keys = ("vocab_size", "decoder_vocab_size", "max_position_embeddings", "activation_function", "scale_embedding",
            "pad_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id", *mc.SIZES)
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(**{key: settings[key] for key in keys})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(0.0, 0.3)
    model.generation_config.forced_eos_token_id = None
    model.generation_config.max_length = 12
    model.save_pretrained(folder)
    tokenizer = MarianTokenizer.from_pretrained(folder)
    sentence = "Ein Mann fährt Fahrrad."
    with torch.no_grad():
        ids = model.generate(**tokenizer([sentence], return_tensors="pt"))[0].tolist()
    keep_only_what_transformers_wrote(folder)
    return {"sentence": sentence, "generated_ids": ids}


def main():
    import transformers

    expected = {"transformers": transformers.__version__}
    expected["t5-v1_1"] = t5_v1_1(HERE / "t5-v1_1")
    expected["marian-forced-eos-left-out"] = marian_forced_eos_left_out(HERE / "marian-forced-eos-left-out")
    (HERE / "expected.json").write_text(json.dumps(expected) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
