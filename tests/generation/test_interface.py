"""`zoo.generation` talks to models only through `zoo.generation.interface`:
it imports no model or layer, and a model missing a method of the
interface is one clear error before any tracing."""

import ast
from pathlib import Path

import pytest

import zoo.generation
from zoo.generation.interface import check_model

SOURCES = sorted(Path(zoo.generation.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_generation_imports_no_model_or_layer(path):
    tree = ast.parse(path.read_text())
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name and name.startswith(("zoo.models", "zoo.layers"))]
    # Nor does it reach into a model's blocks.
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"blocks", "decoder_blocks", "encoder_blocks", "cross_attention_layer", "backbone"}


class _Seq2SeqWithoutStart:
    vocabulary_size = 10
    max_sequence_length = 8
    is_encoder_decoder = True
    source_vocabulary_size = 10

    def empty_cache(self, batch_size, length):
        return ()

    def call_with_cache(self, token_ids, cache, cache_index, context=None):
        return None, cache


def test_an_encoder_decoder_needs_start():
    with pytest.raises(ValueError, match=r"_Seq2SeqWithoutStart has no cached step \(it lacks start\)"):
        check_model(_Seq2SeqWithoutStart())
