"""Data for the zoo: data sets by name, readers, chat data, tf.data
pipelines, synthetic tasks.

Nothing here imports `zoo.layers` or `zoo.models`; the tokenizers are
`zoo.tokenizers`'. TensorFlow and TensorFlow Datasets are imported only by
the functions that need them.
"""

from zoo.data.columns import Columns, hold_out, is_pair_source, is_table, label_ids, label_names, read_columns, read_pairs
from zoo.data.packing import pack_sentences
from zoo.data.buckets import bucketed_batches, divisor_batch_size, int32_masks, interleave, length_buckets
from zoo.data.chat import ChatExamples, chat_examples, read_chat
from zoo.data.registry import DataSet, dataset_info, fetch_dataset, is_cached, list_datasets
from zoo.data.sources import read_labelled, read_parallel, read_text
from zoo.data.synthetic import (
    Task,
    copy_task,
    held_out_split,
    reverse_task,
    sort_task,
    toy_translation,
    toy_translation_pairs,
    word_order_chat,
)
from zoo.errors import DataError

__all__ = [
    "ChatExamples",
    "Columns",
    "DataError",
    "DataSet",
    "Task",
    "chat_examples",
    "check_token_ids",
    "bucketed_batches",
    "divisor_batch_size",
    "int32_masks",
    "interleave",
    "is_cached",
    "length_buckets",
    "list_datasets",
    "classification_dataset",
    "copy_task",
    "dataset_info",
    "fetch_dataset",
    "held_out_split",
    "language_model_eval_batches",
    "language_model_windows",
    "hold_out",
    "is_pair_source",
    "is_table",
    "label_ids",
    "label_names",
    "masked_lm_dataset",
    "pack_sentences",
    "read_columns",
    "read_pairs",
    "read_chat",
    "read_labelled",
    "read_parallel",
    "read_text",
    "reverse_task",
    "seq2seq_dataset",
    "sort_task",
    "toy_translation",
    "toy_translation_pairs",
    "word_order_chat",
]

# The tf.data pipelines load TensorFlow: imported on first use, so that
# `import zoo.data` does not.
_PIPELINES = (
    "check_token_ids",
    "classification_dataset",
    "language_model_eval_batches",
    "language_model_windows",
    "masked_lm_dataset",
    "seq2seq_dataset",
)


def __getattr__(name):
    if name in _PIPELINES:
        from zoo.data import pipelines

        return getattr(pipelines, name)
    raise AttributeError(f"module 'zoo.data' has no attribute {name!r}")
