"""The encoder-decoder Transformer family (Vaswani et al. 2017, Marian's
opus-mt models, BART and T5): its config, models, presets and weight map,
registered once."""

from zoo.families import Family, Task, register
from zoo.models.transformer.config import PRESETS
from zoo.models.transformer.model import EncoderDecoder, EncoderDecoderConfig

__all__ = ['EncoderDecoder', 'EncoderDecoderConfig', 'PRESETS']


def _weight_map():
    from zoo.models.transformer import weight_map

    return weight_map


register(
    Family(
        "transformer",
        EncoderDecoder,
        tasks={"seq2seq": Task()},
        weight_map=_weight_map,
        description="The encoder-decoder of Vaswani et al. 2017 (its output is already logits)",
        presets=PRESETS,
    )
)
