"""The BERT family: its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.bert.config import PRESETS
from zoo.models.bert.model import BertBackbone, BertClassifier, BertConfig, BertMaskedLM, BertSentenceEncoder

__all__ = ['BertBackbone', 'BertClassifier', 'BertConfig', 'BertMaskedLM', 'BertSentenceEncoder', 'PRESETS']


def _weight_map():
    from zoo.models.bert import weight_map

    return weight_map


register(
    Family(
        "bert",
        BertBackbone,
        tasks={
            "masked_lm": Task(BertMaskedLM),
            "classifier": Task(BertClassifier, ("num_classes", "classifier_dropout")),
            "sentence_encoder": Task(BertSentenceEncoder, ("pooling", "normalize")),
        },
        weight_map=_weight_map,
        description="BERT: the encoder, masked-LM pretraining, classification, sentence embeddings",
        presets=PRESETS,
    )
)
