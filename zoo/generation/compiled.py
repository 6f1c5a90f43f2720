"""One compiled function per (model, input shapes, configuration).

A decoding function - a whole generation, or the prefill and a stage's
`while_loop` of a stream (`zoo.generation.loop`), or beam search's whole
loop (`zoo.generation.beam`) - is a Python callable
traced once and compiled with XLA (`tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX); a later call with the same shapes and
configuration reuses it. Other backends run the same function eagerly.

On JAX the functions least recently used past 32 per model are dropped,
and their programs with them. TensorFlow keeps every XLA program it
compiles for the life of the process, whether or not its function is
kept: dropping one would free nothing, and compiling it again would cost
its memory a second time. So on TensorFlow every function is kept; what
bounds their number is the shapes they are compiled for (`zoo.generate`
rounds the lengths up to a few buckets, a server the batch too:
`zoo.generation.Decoding`'s `bucket`).

A program is compiled on a function's first call with new shapes, and kept
on disk by the persistent compilation cache (`zoo.compile_cache`), so that
another process loads it. A compilation says on stderr what it compiles
and for how long, one line per program (`zoo: compiling the generation
loop for batch 1, prompt 16, length 64 ... 12.3 s`); a program loaded from
the cache says nothing unless it takes more than a second.
"""

import collections
import contextlib
import itertools
import sys
import threading
import time
import warnings
import weakref

import keras

from zoo import compile_cache, traced_once

_COMPILED = weakref.WeakKeyDictionary()  # model -> OrderedDict(key -> Compiled)
_PER_MODEL = 32  # the most recently used functions kept per model
_TRACES = [0]


def trace_count():
    """How many times a decoding function has been traced in this process
    (each trace means a new compilation)."""
    return _TRACES[0]


def count_trace():
    """Called first in every decoding function's body, so once per trace."""
    _TRACES[0] += 1


_HELD = weakref.WeakKeyDictionary()  # model -> [its variables' values, the `held` blocks holding them]


@contextlib.contextmanager
def held(*models):
    """Within it, the compiled functions of `models` are given their
    variables' values as they were on entry, instead of listing the
    variables on each call: Keras walks every layer to list them (about
    2.5 ms on SmolLM2-135M's shape), and a loop that calls a program once
    per round or token (a speculative decoding's rounds) pays it each
    time. For calls during which no variable is assigned or added."""
    for model in models:
        entry = _HELD.get(model)
        if entry is None:
            entry = _HELD[model] = [_values(model), 0]
        entry[1] += 1
    try:
        yield
    finally:
        for model in models:
            entry = _HELD.get(model)
            if entry is not None:
                entry[1] -= 1
                if not entry[1]:
                    del _HELD[model]


def _values(model):
    return [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]


def lookup(model, key):
    """The `Compiled` function cached for `model` under `key`, or None."""
    per_model = _COMPILED.get(model)
    if per_model is None or key not in per_model:
        return None
    per_model.move_to_end(key)
    return per_model[key]


def compile(model, key, function):
    """Compiles `function` for `model` and caches it under `key`.

    Args:
        model: the model `function` decodes with (held weakly, here and by
            the function, so that a compiled function does not keep its
            model alive).
        key: hashable, what the traced function depends on.
        function: a decoding function: called with the input arrays, it
            returns a tuple of tensors; it has `model`. It has no state of
            its own: the random draws come from the seeds in its inputs
            (`zoo.generation.samplers`).

    Returns:
        The `Compiled` function.
    """
    per_model = _COMPILED.setdefault(model, collections.OrderedDict())
    per_model[key] = Compiled(function)
    if len(per_model) > _PER_MODEL and keras.config.backend() != "tensorflow":
        per_model.popitem(last=False)
    return per_model[key]


class Compiled:
    """A decoding function compiled for the backend: `compiled(*arrays)`
    -> a tuple of its outputs as NumPy arrays (dicts of them kept);
    `compiled.raw(*arrays)` -> its outputs as the backend's tensors, to feed
    to the next call.

    `function` is a callable object, not a closure: TensorFlow tells apart
    the functions it watches for retracing by their code object, and every
    closure shares one, so compiling one function per shape (by design)
    would read as retracing. Its `what(*arrays)`, if it has one, names the
    program in the line a compilation writes on stderr.

    A function whose `donates_first` is True gives its first input (a
    key/value cache it returns updated) to the program on JAX, which then
    writes the new cache into the same buffers (`jax.jit`'s
    `donate_argnums`) instead of copying the whole cache for each new
    position; the caller must not read that input again.
    """

    def __init__(self, function):
        self.function = function
        self.backend = keras.config.backend()
        self.cache = compile_cache.configure(self.backend)
        self.called = {}  # input shapes -> the TensorFlow concrete function, or True (JAX)
        if self.backend == "tensorflow":
            self.compiled = self._tf_function()
        elif self.backend == "jax":
            import jax

            self.donating = bool(getattr(function, "donates_first", False))
            self.compiled = jax.jit(self.stateless_donating, donate_argnums=(1,)) if self.donating else jax.jit(
                self.stateless)
        else:
            self.compiled = function

    def __call__(self, *arrays):
        return tuple(keras.tree.map_structure(keras.ops.convert_to_numpy, self.raw(*arrays)))

    def raw(self, *arrays):
        if self.backend not in ("tensorflow", "jax"):
            return self.compiled(*arrays)
        signature = _signature(arrays)
        called = self.called.get(signature)
        if called is None:
            return self._first_call(signature, arrays)
        if self.backend == "tensorflow":
            # TensorFlow's traced function for these shapes, called directly:
            # matching a `tf.function`'s signature on every call costs
            # milliseconds, a stream calls once per token.
            return called(*arrays)
        return self._call_jax(arrays)

    def _call_jax(self, arrays):
        if self.donating:
            return self.compiled(self._state(), arrays[0], arrays[1:])
        return self.compiled(self._state(), arrays)

    def _first_call(self, signature, arrays):
        """The call that compiles (or loads) the program for new shapes,
        said on stderr (`Compiling`)."""
        with Compiling(self._what(arrays), self.backend, self.cache) as compiling:
            if self.backend == "jax":
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    outputs = self._call_jax(arrays)
                for warning in caught:
                    if compile_cache.repair_jax([warning], self.cache):
                        compiling.note("a corrupt cache entry was compiled again")
                    else:
                        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
                self.called[signature] = True
                return outputs
            import tensorflow as tf

            concrete = self._trace(arrays)
            try:
                outputs = concrete(*arrays)
            except tf.errors.OpError as error:
                if not compile_cache.repair_tensorflow(error, self.cache):
                    raise
                # TensorFlow keeps the failed read for this traced function:
                # a new trace has a new name, and so a new cache entry.
                compiling.note("a corrupt cache entry was compiled again")
                self.compiled = self._tf_function()
                concrete = self._trace(arrays)
                outputs = concrete(*arrays)
            self.called[signature] = concrete
            return outputs

    def _trace(self, arrays):
        """TensorFlow's traced function for `arrays`' shapes, a stack's
        blocks traced once (`zoo.traced_once`)."""
        with traced_once.sharing():
            return self.compiled.get_concrete_function(*_specs(arrays))

    def _tf_function(self):
        import tensorflow as tf

        # No AutoGraph: the loops are `ops.while_loop`s already, and the
        # Python `for` over the cache stages is meant to unroll.
        return tf.function(self.function, jit_compile=True, autograph=False)

    def _what(self, arrays):
        if hasattr(self.function, "what"):
            return self.function.what(*arrays)
        shapes = ", ".join("x".join(map(str, x.shape)) for x in keras.tree.flatten(arrays) if hasattr(x, "shape")
                           and len(x.shape))
        return f"{type(self.function).__name__} for inputs {shapes}"

    def _state(self):
        model = self.function.model
        entry = _HELD.get(model)
        return entry[0] if entry is not None else _values(model)

    def stateless(self, state, arrays):
        """The function as `jax.jit` traces it. JAX arrays are immutable:
        the model's variables come in as `state`, read through a
        `StatelessScope`, as keras-hub's CausalLM does it."""
        model = self.function.model
        trainable, non_trainable = state
        mapping = itertools.chain(zip(model.trainable_variables, trainable),
                                  zip(model.non_trainable_variables, non_trainable))
        with keras.StatelessScope(state_mapping=mapping):
            return self.function(*arrays)

    def stateless_donating(self, state, first, rest):
        """`stateless` with the first input apart, for `donate_argnums`."""
        return self.stateless(state, (first, *rest))


def _signature(arrays):
    return repr(keras.tree.map_structure(lambda x: None if x is None else (tuple(x.shape), str(x.dtype)), arrays))


def _specs(arrays):
    import tensorflow as tf

    return keras.tree.map_structure(lambda x: x if x is None else tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)), arrays)


class Compiling:
    """Says on stderr what is compiled and for how long, once per program:

        zoo: compiling the generation loop for batch 1, prompt 16, length 64 ... 12.3 s

    The line starts after `ANNOUNCE` seconds (so that a long compilation
    shows what it waits for), or at the end. A program loaded from the
    persistent cache says nothing unless it took `ANNOUNCE` seconds. How it
    tells: JAX reports its cache hits and its compilation's durations
    (`jax.monitoring`); TensorFlow writes a new cache entry right after it
    compiles, before it runs, so the entry's time ends the compilation,
    and no new entry means a program loaded. Without the cache,
    TensorFlow's time includes the first run.
    """

    ANNOUNCE = 1.0
    _lock = threading.Lock()
    _events = None  # JAX's events while a first call runs

    def __init__(self, what, backend, cache):
        self.what, self.backend, self.cache = what, backend, cache
        self.notes, self.announced = [], False

    def note(self, text):
        self.notes.append(text)

    def __enter__(self):
        self.before = compile_cache.entries(self.cache)
        self.start, self.wall = time.perf_counter(), time.time()
        if self.backend == "jax":
            Compiling._listen()
            Compiling._events = []
        self.timer = threading.Timer(self.ANNOUNCE, self._announce)
        self.timer.daemon = True
        self.timer.start()
        return self

    def _announce(self):
        with self._lock:
            if not self.announced:
                self.announced = True
                sys.stderr.write(f"zoo: compiling {self.what} ...")
                sys.stderr.flush()

    def __exit__(self, kind, error, traceback):
        self.timer.cancel()
        seconds, compiled = self._measured()
        with self._lock:
            if error is not None:
                if self.announced:
                    sys.stderr.write(" failed\n")
            elif compiled or self.announced:
                line = "" if self.announced else f"zoo: compiling {self.what} ..."
                said = f"{seconds:.1f} s" + ("" if compiled else ", loaded from the compilation cache")
                sys.stderr.write(f"{line} {'; '.join([said] + self.notes)}\n")
            self.announced = True  # a late timer says nothing
            sys.stderr.flush()
        return False

    def _measured(self):
        """(seconds, whether a program was compiled rather than loaded)."""
        total = time.perf_counter() - self.start
        if self.backend == "jax":
            events, Compiling._events = Compiling._events or [], None
            hits = sum(1 for name, _ in events if name.endswith("/cache_hits"))
            misses = sum(1 for name, _ in events if name.endswith("/cache_misses"))
            seconds = sum(duration for name, duration in events if name.startswith("/jax/core/compile/"))
            return (seconds or total), bool(misses or not hits)
        new = compile_cache.entries(self.cache) - self.before
        if self.cache is None:
            return total, True
        if not new:
            return total, False
        written = max((self.cache / name).stat().st_mtime for name in new)
        return min(max(written - self.wall, 0.0), total), True

    @classmethod
    def _listen(cls):
        if getattr(cls, "_listening", False):
            return
        import jax

        def event(name, **kwargs):
            if cls._events is not None and name.startswith("/jax/compilation_cache/"):
                cls._events.append((name, 0.0))

        def duration(name, seconds, **kwargs):
            if cls._events is not None and name.startswith("/jax/core/compile/"):
                cls._events.append((name, seconds))

        jax.monitoring.register_event_listener(event)
        jax.monitoring.register_event_duration_secs_listener(duration)
        cls._listening = True
