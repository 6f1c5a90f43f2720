"""The persistent compilation cache: each XLA program compiled once per machine.

The zoo's decoding loops, beam search and scoring are XLA programs
(`zoo.generation.compiled`); on a CPU each takes seconds to minutes to
compile. JAX's persistent compilation cache and TensorFlow's XLA
persistent cache keep them on disk, so that a second process loads them:

    $ZOO_HOME/compiled/<backend>-<version>-<key>/      (~/.cache/zoo/compiled/...)

`<key>` hashes what a compiled program depends on beyond its own text:
the backend's, Keras' and the zoo's versions, the XLA flags in the
environment, and this machine's CPU (its model name and feature flags,
from /proc/cpuinfo), so a program compiled for another CPU or another
version is never loaded. `ZOO_COMPILE_CACHE=0` turns the cache off.

Where it is set:
- TensorFlow reads `TF_XLA_FLAGS` once, the first time it compiles or
  optimizes a `tf.function`; so `import zoo` adds
  `--tf_xla_persistent_cache_directory=...` to the environment variable
  (the only side effect of importing the zoo), unless it names a cache
  directory already. A process that ran a `tf.function` before importing
  the zoo keeps the flags it read.
- JAX: `jax_compilation_cache_dir` is set when the zoo compiles its first
  function (`configure`), unless it is set already.

TensorFlow's key holds the name of the traced function
(`__inference_function_1234`, numbered in tracing order), so a process
finds the programs another one wrote when it traces the same functions in
the same order: the same command run again, with prompts in the same
length buckets (`zoo.generation.Decoding`). JAX's key is the program's
text alone.

A corrupt or foreign entry is ignored and rebuilt: JAX warns, compiles and
goes on (`repair_jax` removes the entry, which JAX would not overwrite);
TensorFlow fails the call, so `repair_tensorflow` removes the entries that
do not read back and the caller traces the function again, under a new
name. Either way the next process writes the entry again.
"""

import hashlib
import importlib.metadata
import os
import platform
import re
import zlib
from pathlib import Path

from zoo.files import zoo_home

OFF = ("0", "false", "no", "off")
_TF_FLAG = "--tf_xla_persistent_cache_directory"
_CONFIGURED = {}  # backend -> the folder in use, or None
# What TensorFlow says when a cache entry does not read back.
_TF_READ_ERRORS = ("as binary proto", "Serialized cache key does not match", "Read less bytes",
                   "xla_compile_cache")
_JAX_READ_ERROR = "Error reading persistent compilation cache entry"


def enabled():
    """Whether the cache is on: `ZOO_COMPILE_CACHE` is not 0 (or false, no, off)."""
    return os.environ.get("ZOO_COMPILE_CACHE", "1").strip().lower() not in OFF


def machine():
    """This machine's CPU, as compiled code depends on it: its
    architecture, vendor, model name and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part"):
            fields.setdefault(name, value.strip())
    described = " | ".join(f"{name}={fields[name]}" for name in sorted(fields))
    return f"{platform.machine()} {described or platform.processor()}"


def folder(backend):
    """Where `backend`'s compiled programs are kept on this machine (not created here)."""
    libraries = {"jax": ("jax", "jaxlib"), "tensorflow": ("tensorflow",)}.get(backend, (backend,))
    versions = [f"{name}={_version(name)}" for name in (*libraries, "keras", "zoo")]
    flags = [f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}", f"TF_XLA_FLAGS={_without_cache(_tf_flags())}"]
    flags += [f"{name}={os.environ.get(name, '')}" for name in ("TF_ENABLE_ONEDNN_OPTS", "JAX_ENABLE_X64")]
    key = hashlib.sha256("\n".join(versions + flags + [machine()]).encode()).hexdigest()[:16]
    return zoo_home() / "compiled" / f"{backend}-{_version(libraries[0])}-{key}"


def configure(backend):
    """Points `backend`'s persistent cache at `folder(backend)`, once per
    process; a cache directory the user set is kept. Returns the folder in
    use, or None (the cache off, or a backend without one)."""
    if backend not in _CONFIGURED:
        _CONFIGURED[backend] = {"tensorflow": _configure_tensorflow, "jax": _configure_jax}.get(backend, _none)()
    return _CONFIGURED[backend]


def entries(where):
    """The names of the entries in a cache folder (an empty set for None or a missing folder)."""
    if where is None:
        return set()
    try:
        return {name for name in os.listdir(where) if name.endswith((".pb", "-cache"))}
    except OSError:
        return set()


def repair_tensorflow(error, where):
    """After TensorFlow's `error` on a compiled call: whether it came from
    reading a cache entry, in which case the entries of `where` that do not
    read back are removed (the caller then traces the function again)."""
    message = str(error)
    if where is None or not any(marker in message for marker in _TF_READ_ERRORS):
        return False
    for name in entries(where):
        path = Path(where) / name
        if name.endswith(".pb") and (str(path) in message or not _tensorflow_entry_reads(path)):
            path.unlink(missing_ok=True)
    return True


def repair_jax(warnings, where):
    """After a compiled call that raised `warnings`: when JAX could not read
    an entry of `where` (it then compiled the program again, but does not
    overwrite the entry), the entries that do not decompress are removed,
    so that the next process writes them again. Returns whether one was."""
    if where is None or not any(_JAX_READ_ERROR in str(warning.message) for warning in warnings):
        return False
    removed = False
    for name in entries(where):
        path = Path(where) / name
        if name.endswith("-cache") and not _decompresses(path.read_bytes()):
            path.unlink(missing_ok=True)
            Path(str(path)[: -len("-cache")] + "-atime").unlink(missing_ok=True)
            removed = True
    return removed


def _configure_tensorflow():
    flags = _tf_flags()
    given = re.search(rf"{_TF_FLAG}=(\S+)", flags)
    if given and not _is_ours(Path(given.group(1))):
        return Path(given.group(1))
    flags = _without_cache(flags)  # a folder set by a parent zoo process is set again, or dropped
    if not enabled():
        os.environ["TF_XLA_FLAGS"] = flags
        return None
    where = folder("tensorflow")
    os.environ["TF_XLA_FLAGS"] = f"{flags} {_TF_FLAG}={where}".strip()
    return where


def _configure_jax():
    import jax

    given = jax.config.jax_compilation_cache_dir
    if given:
        return Path(given)
    if not enabled():
        return None
    where = folder("jax")
    jax.config.update("jax_compilation_cache_dir", str(where))
    # The zoo's programs take seconds; JAX's eager operations, milliseconds, stay out.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.25)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return where


def keras_backend():
    """The Keras backend in use."""
    import keras

    return keras.config.backend()


def _none():
    return None


def _tf_flags():
    return os.environ.get("TF_XLA_FLAGS", "")


def _without_cache(flags):
    return re.sub(rf"\s*{_TF_FLAG}=\S+", "", flags).strip()


def _is_ours(path):
    return path.parent.name == "compiled" and path.name.startswith("tensorflow-")


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _decompresses(data):
    """Whether a JAX cache entry decompresses (zlib, or zstandard when installed)."""
    try:
        zlib.decompress(data)
        return True
    except zlib.error:
        pass
    try:
        import zstandard
    except ImportError:
        return False
    try:
        zstandard.ZstdDecompressor().decompress(data)
        return True
    except zstandard.ZstdError:
        return False


def _tensorflow_entry_reads(path):
    """Whether a TensorFlow cache entry reads back: a well-formed
    `XlaSerializedCacheEntry` (key = 1, hlo_module = 2, executable = 3)
    whose key's fingerprints are those in its file name
    (`xla_compile_cache__<signature>__<cluster>__<device>.pb`)."""
    try:
        fields = _proto_fields(path.read_bytes())
        key = _proto_fields(fields[1][-1])
        names = path.name.split("__")
        return 2 in fields and 3 in fields and [str(key[1][-1]), str(key[2][-1])] == names[1:3]
    except (OSError, KeyError, IndexError, ValueError):
        return False


def _proto_fields(data):
    """{field number: [values]} of a serialized protocol buffer's top level
    (varints as ints, length-delimited fields as bytes); a ValueError for
    one that is cut short or malformed."""
    fields, at = {}, 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            value, at = _varint(data, at)
        elif kind == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("a field runs past the end")
            value, at = data[at: at + size], at + size
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            value, at = data[at: at + size], at + size
        else:
            raise ValueError(f"wire type {kind}")
        if number == 0 or at > len(data):
            raise ValueError("malformed")
        fields.setdefault(number, []).append(value)
    return fields


def _varint(data, at):
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a varint runs past the end")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
