"""Token-id generation with a key/value cache: `zoo.generation.generate`
and `zoo.generation.beam_search` (`zoo.generate` is the front door that
also takes text).

    import zoo
    lm = zoo.build("gpt-nano", task="causal_lm")
    out = zoo.generation.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=8)
    out.sequences  # the new tokens of each prompt

`Decoding` runs a generation step by step (`zoo.stream` and `zoo serve`
use it); `generate` runs one to the end.
"""

from zoo.generation.api import (
    BeamSearchOutput,
    GenerationOutput,
    beam_search,
    generate,
)
from zoo.generation.compiled import trace_count
from zoo.generation.engine import Decoding
from zoo.generation.samplers import SAMPLERS, sampler_config, sampler_options

__all__ = [
    "SAMPLERS",
    "BeamSearchOutput",
    "Decoding",
    "GenerationOutput",
    "beam_search",
    "generate",
    "sampler_config",
    "sampler_options",
    "trace_count",
]
