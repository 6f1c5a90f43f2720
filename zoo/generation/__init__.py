"""Autoregressive generation with a key/value cache (`zoo.generate`).

    import zoo
    lm = zoo.build("gpt-nano", task="causal_lm")
    out = zoo.generation.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=8)
    out.sequences  # the new tokens of each prompt
"""

from zoo.generation.api import (
    BeamSearchOutput,
    GenerationOutput,
    beam_search,
    generate,
)
from zoo.generation.compiled import trace_count

__all__ = ["BeamSearchOutput", "GenerationOutput", "beam_search", "generate", "trace_count"]
