"""zoo: a Keras 3 model zoo of Transformers.

    import zoo
    model = zoo.build("gpt2-small", task="causal_lm")
"""

__version__ = "0.1.0"

from zoo.factory import build, describe, list_presets, plot  # noqa: E402

__all__ = ["build", "describe", "list_presets", "plot"]
