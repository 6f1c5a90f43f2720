"""What every zoo model shares: its constructor arguments are its config.

A zoo model is a functional Keras model (`keras.Model(inputs, outputs)`)
built inside `__init__`; nothing overrides `call`. Saving stores the
constructor arguments, loading calls the constructor again, so the `.keras`
format round-trips with `safe_mode=True`.
"""

import inspect

import keras


class ZooModel(keras.Model):
    """Base class: records constructor arguments and rebuilds from them."""

    def _record_config(self, **arguments):
        self._zoo_config = dict(arguments)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key, value in self._zoo_config.items():
            if isinstance(value, keras.Model):
                value = keras.saving.serialize_keras_object(value)
            config[key] = value
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls._nested_models():
            if key in config and isinstance(config[key], dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)

    @classmethod
    def _nested_models(cls):
        return ("backbone",)

    @classmethod
    def argument_names(cls):
        """The constructor arguments a preset or an override may set."""
        parameters = inspect.signature(cls.__init__).parameters
        return tuple(name for name in parameters if name not in ("self", "kwargs", "name", "dtype"))


def check_positive(**values):
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")


def gpt_initializer(stddev=0.02):
    return keras.initializers.RandomNormal(stddev=stddev)
