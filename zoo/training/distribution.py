"""The distribution strategy of a recipe, by name: a `tf.distribute`
strategy on TensorFlow, `keras.distribution.DataParallel` on JAX.

- "default": one device (the first GPU if there is one).
- "data-parallel": every local device holds a copy of the model and trains
  on its share of each batch; gradients are averaged. JAX:
  `keras.distribution.DataParallel`; TensorFlow: `MirroredStrategy`.
- "mirrored": TensorFlow's `MirroredStrategy` (on JAX, the same as
  "data-parallel").
- "model-parallel": JAX only. `keras.distribution.ModelParallel` over a
  (batch, model) mesh of the local devices (`--mesh 2x4`): the batch is
  split along the first axis, and the large kernels along the second, by
  the model's layout map (`ZooModel.get_layout_map`), so a model too big
  for one device trains on several.
- "multi-worker", "tpu": TensorFlow only (below).

On JAX, several processes (GPU hosts, a TPU slice) join when the
environment says so, as `keras.distribution.initialize` reads it:
KERAS_DISTRIBUTION_JOB_ADDRESSES (process 0's host:port first),
KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID;
`start_distribution` checks them and joins before JAX computes anything,
and only process 0 writes the run's folder (`worker_output`).

TensorFlow loads only when a TensorFlow strategy is asked for. One strategy
is made per kind and process ("data-parallel" and "mirrored" share one), and
kept: `MultiWorkerMirroredStrategy`
starts a gRPC server and configures the collective ops, which can happen
once, before TensorFlow runs its first op (`start_distribution`).

`--strategy multi-worker` reads the cluster from the `TF_CONFIG`
environment variable, one per process, e.g. for the second of two workers:

    TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                "task": {"type": "worker", "index": 1}}'

Every worker runs the same command on the same global batch; each trains
on its share of every batch (tf.data auto-sharding) and all end with the
same weights. Only the chief (worker 0, or the "chief" task) writes the
run's folder: `worker_output`.
"""

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

import keras

STRATEGIES = ("default", "data-parallel", "mirrored", "model-parallel", "multi-worker", "tpu")
_TF_ONLY = ("multi-worker", "tpu")
_JAX_ONLY = ("model-parallel",)
TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}'
)

_strategies = {}  # name -> tf.distribute.Strategy, made once per process


def distribution_scope(name, mesh=None, layout_map=None):
    """A scope for model creation and compile, by strategy name.

    TensorFlow: a `tf.distribute` strategy (the dataset's batch is the global
    batch; Keras splits it across replicas, and across workers with
    "multi-worker"). JAX: "data-parallel" (or "mirrored") sets
    `keras.distribution.DataParallel` over all local devices for the rest of
    the process, since `fit` must shard its batches under it too; the batch
    size must then be a multiple of the device count. "model-parallel"
    (JAX) sets `keras.distribution.ModelParallel` the same way.

    Args:
        name: one of `STRATEGIES`.
        mesh: "model-parallel" only: (batch, model) device counts, or a
            "BATCHxMODEL" string; their product must be the number of
            local devices.
        layout_map: "model-parallel" only: `get_layout_map(device_mesh)`,
            the variables' layout (`zoo.models.ZooModel.get_layout_map`).

    Returns:
        A context manager to build and compile the model in.

    Example:

    ```python
    with distribution_scope("data-parallel"):
        model = zoo.build("gpt-nano", vocabulary_size=65)
        model.compile(...)
    model.fit(...)
    ```
    """
    check_strategy(name)
    if name == "default":
        return contextlib.nullcontext()
    if name == "model-parallel":
        if layout_map is None:
            raise ValueError("--strategy model-parallel needs the model's layout map; got none.")
        batch, model = parse_mesh(mesh)
        device_mesh = keras.distribution.DeviceMesh(
            (batch, model), ("batch", "model"), keras.distribution.list_devices()
        )
        keras.distribution.set_distribution(
            keras.distribution.ModelParallel(layout_map=layout_map(device_mesh), batch_dim_name="batch")
        )
        return contextlib.nullcontext()
    if keras.backend.backend() == "jax":
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext()
    return _tf_strategy(name).scope()


def parse_mesh(mesh):
    """(batch, model) device counts from "BATCHxMODEL" or a pair, checked
    against the local devices: one clear line if they do not fit."""
    devices = len(keras.distribution.list_devices())
    if mesh is None:
        raise ValueError(f"--strategy model-parallel needs --mesh BATCHxMODEL (this machine has {devices} devices).")
    try:
        batch, model = (int(n) for n in (mesh.lower().split("x") if isinstance(mesh, str) else mesh))
    except (TypeError, ValueError):
        raise ValueError(f"--mesh must be BATCHxMODEL, two positive integers such as 2x4; got {mesh!r}.") from None
    if batch < 1 or model < 1 or batch * model != devices:
        raise ValueError(
            f"--mesh {batch}x{model} needs {batch * model} devices; this machine has {devices} "
            f"(expected BATCHxMODEL with BATCH * MODEL = {devices})."
        )
    return batch, model


def check_batch_size(name, batch_size, mesh=None):
    """One clear line unless the global batch splits evenly across the
    replicas of strategy `name` (on JAX: the devices, or the mesh's batch
    axis for "model-parallel")."""
    if name == "default" or keras.backend.backend() != "jax":
        return
    replicas = parse_mesh(mesh)[0] if name == "model-parallel" else len(keras.distribution.list_devices())
    if batch_size % replicas:
        raise ValueError(
            f"--batch-size {batch_size} does not split across {replicas} replicas of --strategy {name}; "
            f"expected a multiple of {replicas}."
        )


def check_strategy(name):
    """Raise a one-line ValueError unless strategy `name` exists and runs
    on the current Keras backend."""
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}; got {name!r}.")
    backend = keras.backend.backend()
    if name == "default" or (backend == "tensorflow" and name not in _JAX_ONLY):
        return
    if backend == "jax" and name not in _TF_ONLY:
        return
    if name in _JAX_ONLY:
        raise ValueError(f"--strategy {name} needs the JAX backend (KERAS_BACKEND=jax); on {backend} use 'default'"
                         + (" or 'mirrored'." if backend == "tensorflow" else "."))
    runs_on = "'default'" if backend != "jax" else "'default' or 'data-parallel'"
    raise ValueError(
        f"--strategy {name} needs the TensorFlow backend (KERAS_BACKEND=tensorflow); "
        f"on {backend} use {runs_on}."
    )


def start_distribution(name, mesh=None, batch_size=None):
    """Make the strategy now, before TensorFlow runs any op (a tf.data
    pipeline included): "multi-worker" must, the others may. The later
    `distribution_scope(name)` reuses it. Checks first that the strategy
    runs on this backend, TF_CONFIG for "multi-worker", and on JAX that
    the mesh fits the devices and `batch_size` splits across them."""
    check_strategy(name)
    if name != "default" and keras.backend.backend() == "jax" and jax_process_count() > 1:
        _initialize_jax_processes()
    if name == "model-parallel":
        parse_mesh(mesh)
    elif mesh is not None:
        raise ValueError(f"--mesh is for --strategy model-parallel; got --strategy {name}.")
    if batch_size is not None:
        check_batch_size(name, batch_size, mesh)
    if name == "multi-worker":
        cluster_config()
    if name != "default" and keras.backend.backend() == "tensorflow":
        _tf_strategy(name)


JAX_PROCESS_VARIABLES = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


def jax_process_count():
    """The number of JAX processes the environment asks for
    (`KERAS_DISTRIBUTION_NUM_PROCESSES`, as `keras.distribution.initialize`
    reads it); 1 without it."""
    value = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"KERAS_DISTRIBUTION_NUM_PROCESSES must be a positive integer; got {value!r}.")
    return int(value)


def jax_process_id():
    """This process's index among the JAX processes (0 without any)."""
    return int(os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0")) if jax_process_count() > 1 else 0


def _initialize_jax_processes():
    """`keras.distribution.initialize()` from the environment, checked
    first: the coordinator's address (process 0's host:port, first in
    KERAS_DISTRIBUTION_JOB_ADDRESSES), the process count and this
    process's index. Must run before JAX computes anything."""
    import jax

    if jax.distributed.is_initialized():
        return
    count = jax_process_count()
    addresses = [a for a in os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES", "").split(",") if a]
    index = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "")
    expected = (
        f"expected, on each of the {count} processes, KERAS_DISTRIBUTION_JOB_ADDRESSES=host0:port[,host1:port...] "
        f"(process 0's first) and KERAS_DISTRIBUTION_PROCESS_ID=0..{count - 1}"
    )
    if not addresses or not all(":" in a for a in addresses):
        raise ValueError(f"KERAS_DISTRIBUTION_JOB_ADDRESSES is {os.environ.get('KERAS_DISTRIBUTION_JOB_ADDRESSES')!r}; "
                         f"{expected}.")
    if not index.isdigit() or int(index) >= count:
        raise ValueError(f"KERAS_DISTRIBUTION_PROCESS_ID is {index!r}; {expected}.")
    keras.distribution.initialize(",".join(addresses), count, int(index))


def _tf_strategy(name):
    name = "mirrored" if name == "data-parallel" else name  # one MirroredStrategy per process
    if name in _strategies:
        return _strategies[name]
    import tensorflow as tf

    if name in ("mirrored", "data-parallel"):
        strategy = tf.distribute.MirroredStrategy()
    elif name == "multi-worker":
        cluster_config()  # a clear error before TensorFlow's own
        # AUTO: NCCL between GPUs, RING (gRPC) between CPUs.
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
        )
        try:
            strategy = _multi_worker_strategy_class()(communication_options=options)
        except RuntimeError as error:
            if "program startup" not in str(error):
                raise
            raise RuntimeError(
                "--strategy multi-worker must be set up before TensorFlow runs its first op: call "
                "zoo.training.distribution.start_distribution('multi-worker') at the top of main(), "
                "before any tf.data pipeline or tensor is made."
            ) from error
    else:
        # TPU_NAME: the TPU's name or grpc:// address; "local" on a TPU VM.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME"))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    _strategies[name] = strategy
    return strategy


def _multi_worker_strategy_class():
    """`MultiWorkerMirroredStrategy` whose `reduce` takes what Keras 3
    hands it (keras-team/keras#20585, #20329):

    - a nested structure: `fit`/`evaluate` reduce the first (x, y) batch
      with `strategy.reduce("MEAN", batch)` to build the metrics, which the
      multi-worker strategy sends whole to one all-reduce ("Attempt to
      convert a value ... to a Tensor"); it is reduced leaf by leaf, as
      `MirroredStrategy` does;
    - a scalar with `axis=0`: each step's logs (scalars) are reduced with
      `reduce("MEAN", v, axis=0)` ("Invalid reduction dimension 0 for input
      with 0 dimensions"); a scalar has no batch axis, so it is reduced
      across replicas only.
    """
    import tensorflow as tf

    class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
        def reduce(self, reduce_op, value, axis=None):
            def one(v):
                shape = getattr(self.experimental_local_results(v)[0], "shape", None)
                scalar = shape is not None and shape.rank == 0
                return super(MultiWorkerMirroredStrategy, self).reduce(reduce_op, v, None if scalar else axis)

            return tf.nest.map_structure(one, value)

    return MultiWorkerMirroredStrategy


def cluster_config():
    """The checked `TF_CONFIG` of this process, as a dict with "cluster"
    (job name -> list of "host:port") and "task" ({"type", "index"})."""
    text = os.environ.get("TF_CONFIG")
    expected = f"expected a JSON object like TF_CONFIG='{TF_CONFIG_EXAMPLE}'"
    if not text:
        raise ValueError(
            "--strategy multi-worker reads the cluster from the TF_CONFIG environment variable, which is not set; "
            f"set it on every worker, {expected} (task index = this worker's place in the list)."
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}); {expected}.") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not any(cluster.get(job) for job in ("chief", "worker")):
        raise ValueError(f"TF_CONFIG has no 'cluster' with a 'worker' (or 'chief') list of host:port; {expected}.")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(f"TF_CONFIG has no 'task' with 'type' and 'index'; {expected}.")
    addresses = cluster.get(task["type"])
    if not isinstance(addresses, list) or not isinstance(task["index"], int) or not 0 <= task["index"] < len(addresses):
        raise ValueError(
            f"TF_CONFIG's task {task['type']!r} #{task['index']} is not in its cluster {cluster}; {expected}."
        )
    return config


def is_chief():
    """Whether this process writes the run's shared files: the "chief" task,
    else worker 0 (tf.distribute's rule); JAX process 0; always with
    neither TF_CONFIG nor several JAX processes."""
    if keras.backend.backend() == "jax":
        return jax_process_id() == 0
    if not os.environ.get("TF_CONFIG"):
        return True
    config = cluster_config()
    task, cluster = config["task"], config["cluster"]
    if task["type"] == "chief":
        return True
    return "chief" not in cluster and task["type"] == "worker" and task["index"] == 0


def worker_output(path, name):
    """The folder this process writes a run's files to under strategy
    `name`: `path` itself, except for a "multi-worker" worker other than the
    chief, or a JAX process other than process 0, which writes the same
    files (checkpoints, logs) to a private
    folder of its own, so that workers sharing a file system never write one
    file at once.

    The private folder is in the system's temporary folder and depends only
    on `path` and the task, so a restarted worker finds its own backup
    (`BackupAndRestore`) again; its weights are the chief's.
    """
    jax_processes = keras.backend.backend() == "jax" and name != "default" and jax_process_count() > 1
    if not (name == "multi-worker" or jax_processes) or is_chief():
        return Path(path)
    if jax_processes:
        task = f"process{jax_process_id()}"
    else:
        task = "{type}{index}".format(**cluster_config()["task"])
    digest = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"zoo-{Path(path).name}-{digest}-{task}"
