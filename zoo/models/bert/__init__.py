"""The BERT family: its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.bert.config import PRESETS
from zoo.models.bert.model import BertBackbone, BertClassifier, BertConfig, BertMaskedLM, BertSentenceEncoder

__all__ = ['BertBackbone', 'BertClassifier', 'BertConfig', 'BertMaskedLM', 'BertSentenceEncoder', 'PRESETS']

register(
    Family(
        "bert",
        BertBackbone,
        tasks={
            "masked_lm": Task(BertMaskedLM),
            "classifier": Task(BertClassifier, ("num_classes", "classifier_dropout")),
            "sentence_encoder": Task(BertSentenceEncoder, ("pooling", "normalize")),
        },
        weight_map="zoo.models.bert.weight_map",
        description="BERT: the encoder, masked-LM pretraining, classification, sentence embeddings",
        presets=PRESETS,
    )
)
