"""zoo: a Keras 3 model zoo of Transformers."""

__version__ = "0.1.0"
