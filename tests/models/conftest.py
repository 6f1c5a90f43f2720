"""Inputs for the tiny presets of each family."""

import numpy as np
import pytest


def gpt_inputs(batch=2, length=8, vocab=100, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(1, vocab, (batch, length)).astype("int32"),
        "padding_mask": np.ones((batch, length), "int32"),
    }


def bert_inputs(batch=2, length=8, vocab=100, seed=0, lengths=None):
    rng = np.random.default_rng(seed)
    lengths = lengths or [length] * batch
    mask = np.array([[1] * n + [0] * (length - n) for n in lengths], "int32")
    return {
        "token_ids": (rng.integers(5, vocab, (batch, length)) * mask).astype("int32"),
        "segment_ids": np.zeros((batch, length), "int32"),
        "padding_mask": mask,
    }


def seq2seq_inputs(batch=2, source_length=9, target_length=7, vocab=1000, seed=0, source_lengths=None):
    rng = np.random.default_rng(seed)
    source_lengths = source_lengths or [source_length] * batch
    source_mask = np.array([[1] * n + [0] * (source_length - n) for n in source_lengths], "int32")
    return {
        "encoder_token_ids": (rng.integers(4, vocab, (batch, source_length)) * source_mask).astype("int32"),
        "encoder_padding_mask": source_mask,
        "decoder_token_ids": rng.integers(4, vocab, (batch, target_length)).astype("int32"),
        "decoder_padding_mask": np.ones((batch, target_length), "int32"),
    }


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
