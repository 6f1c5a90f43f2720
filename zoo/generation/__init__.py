"""Decoding with a key/value cache, on token ids: the engine behind
`zoo.generate`, `zoo.stream`, `zoo serve` and `zoo explore`.

    import zoo
    lm = zoo.build("gpt-nano", task="causal_lm")
    out = zoo.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=8)
    out.sequences  # the new tokens of each prompt
    beams = zoo.generation.beam_search(lm, [[1, 2, 3]], max_new_tokens=8, num_beams=4)

`zoo.generate` is the one generate (text or token ids); `beam_search`
returns every beam; `Decoding` runs a generation step by step (`zoo.stream`
and `zoo serve` use it).
"""

from zoo.generation.api import BeamSearchOutput, GenerationOutput, beam_search
from zoo.generation.compiled import trace_count
from zoo.generation.engine import Decoding
from zoo.generation.samplers import SAMPLERS, Sampling, sampler_options

__all__ = [
    "SAMPLERS",
    "BeamSearchOutput",
    "Decoding",
    "GenerationOutput",
    "Sampling",
    "beam_search",
    "sampler_options",
    "trace_count",
]

