"""Multi-node training inside SLURM jobs: TensorFlow's SlurmClusterResolver, chief-only output.

Inside ``srun`` every task runs this same program. TensorFlow's
``SlurmClusterResolver`` reads the job step's SLURM variables (task id, node list,
tasks per node) and builds the cluster spec: one worker per task, ports
``port_base + local task index`` on each node. With GPUs it also sets
``CUDA_VISIBLE_DEVICES`` per task, which must happen before TensorFlow
initialises its devices, so the resolver is built first.

Security: the cluster spec names only the job's nodes and ports, but TensorFlow's
gRPC server is unauthenticated and binds every interface (``[::]:port``) whatever
the spec says; TensorFlow offers no bind address to set. So each task re-executes
itself once, before TensorFlow loads, with workloads/netbind's preload library,
which moves that bind onto the address the job's other nodes reach this node at
(``bind_to_node``; workloads/netbind/address.py: the route towards them, never
loopback across nodes). That address also replaces this node's name in the spec
this task uses, so the tasks of the same node connect to it even where the
node's name means loopback here (Debian's ``127.0.1.1 <hostname>``). The workers
stay unauthenticated: jobs still belong on a trusted cluster network with the
port range (20000-39999) firewalled to the cluster (scripts/slurm/README.md;
tests/slurm/test_worker_addresses.py).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from typing import Any

from workloads import netbind
from workloads.cifar10 import hostlist
from workloads.errors import WorkloadError

DEFAULT_PORT_BASE = 20000
PORTS_PER_JOB = 16  # workers per node a job can have; jobs sharing a node get disjoint ranges


@dataclass(frozen=True)
class SlurmTask:
    """This process's place in the job step."""

    task_id: int
    workers: int
    nodes: list[str]
    gpus_per_node: int
    binding: netbind.Binding | None = None

    @property
    def is_chief(self) -> bool:
        return self.task_id == 0


def slurm_task_count() -> int:
    return int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1)


def wants_slurm(mode: str) -> bool:
    """``slurm`` forces it; ``auto`` uses it inside a SLURM job step with several tasks."""
    if mode == "slurm":
        if "SLURM_PROCID" not in os.environ:
            raise WorkloadError(
                "--distributed slurm outside a SLURM job step (no SLURM_PROCID)",
                "launch it with srun inside an sbatch job (see scripts/slurm/)",
            )
        return True
    return mode == "auto" and "SLURM_PROCID" in os.environ and slurm_task_count() > 1


def port_base() -> int:
    """Ports per job, so two jobs sharing a node do not collide: from the job id."""
    explicit = os.environ.get("WORKLOADS_SLURM_PORT_BASE")
    if explicit:
        return int(explicit)
    job = int(os.environ.get("SLURM_JOB_ID", "0") or 0)
    return DEFAULT_PORT_BASE + (job * PORTS_PER_JOB) % 20000


def this_node() -> str:
    """The name slurmd gave this task's node (``SLURMD_NODENAME``), as the spec names it."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def step_nodes() -> list[str]:
    """The job step's nodes, from the host list TensorFlow's resolver reads too."""
    for variable in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        text = os.environ.get(variable, "")
        if text:
            try:
                return hostlist.expand(text)
            except hostlist.HostlistError as exc:
                raise WorkloadError(f"{variable}={text} is not a SLURM host list ({exc})",
                                    "launch the workers with srun, which sets it") from None
    return []


@functools.cache
def bind_to_node() -> netbind.Binding:
    """Keep this task's TensorFlow worker on its node's address (re-executes once; see netbind).

    Called before Keras or TensorFlow is imported (workloads cifar10 does it first);
    later calls return the same answer. The node is the one slurmd named for
    this task (``SLURMD_NODENAME``), the name the cluster spec gives the other
    workers for it; its peers are the step's other nodes; the ports are the job's
    whole range.
    """
    node = this_node()
    peers = sorted({name for name in step_nodes() if name != node})
    base = port_base()
    return netbind.keep_workers_on_node(node, base, base + PORTS_PER_JOB - 1, peers)


def _host_port(address: str, port: str) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def with_own_address(workers: list[str], node: str, address: str) -> list[str]:
    """`workers` (``host:port``) with `node`'s entries at `address`, where its workers listen.

    The other nodes' entries keep their names, resolved here as before; only this
    node's own name may mean loopback here (``127.0.1.1 <hostname>``), where none
    of its workers listens.
    """
    moved = []
    for worker in workers:
        host, port = worker.rsplit(":", 1)
        moved.append(_host_port(address, port) if host == node else worker)
    return moved


def gpus_per_node() -> int:
    """GPUs SLURM gave this node (gres), else the GPUs NVML sees, else 0 (CPU workers)."""
    granted = os.environ.get("SLURM_GPUS_ON_NODE")
    if granted:
        return int(granted)
    from workloads.envinfo import nvml_gpus

    return len(nvml_gpus()[1])


def resolve(tf: Any, binding: netbind.Binding | None = None) -> tuple[Any, SlurmTask]:
    """Build the resolver (setting CUDA_VISIBLE_DEVICES per task) before devices exist.

    ``SlurmClusterResolver`` gives the cluster spec, this task's id and the GPU split,
    but it cannot describe CPU-only workers (its GPU arithmetic divides by zero) and
    then over-reports accelerators. So it is asked for the spec with a nominal GPU
    slot per task and no GPU assignment when the node has none, and the strategy gets
    a ``SimpleClusterResolver`` with the same spec and the real accelerator count.
    With a `binding` to one address, this node's workers are named by that address
    (``with_own_address``).
    """
    cluster = tf.distribute.cluster_resolver
    gpus = gpus_per_node()
    options: dict[str, Any] = {"gpus_per_node": gpus, "auto_set_gpu": True}
    if gpus == 0:
        options = {"gpus_per_node": 1 << 16, "gpus_per_task": 1, "auto_set_gpu": False}
    try:
        slurm = cluster.SlurmClusterResolver(port_base=port_base(), **options)
        spec = slurm.cluster_spec()
    except RuntimeError as exc:
        raise WorkloadError(
            f"SLURM job step cannot be mapped to TensorFlow workers ({exc})",
            "request whole GPUs per task, e.g. --ntasks-per-node=N --gres=gpu:N",
        ) from exc
    task_id = int(slurm.task_id)
    per_task = len(os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")) if gpus else 0
    workers = list(spec.as_dict()["worker"])
    nodes = sorted({address.rsplit(":", 1)[0] for address in workers})
    if binding is not None and binding.address:
        workers = with_own_address(workers, this_node(), binding.address)
        spec = tf.train.ClusterSpec({"worker": workers})
    resolver = cluster.SimpleClusterResolver(
        spec,
        task_type="worker",
        task_id=task_id,
        rpc_layer="grpc",
        num_accelerators={"GPU": per_task},
    )
    task = SlurmTask(
        task_id=task_id, workers=spec.num_tasks("worker"), nodes=nodes, gpus_per_node=gpus
    )
    return resolver, task


def fit_custom_loop(
    model: Any,
    strategy: Any,
    train_ds: Any,
    *,
    epochs: int,
    steps: int,
    global_batch: int,
    timer: Any,
) -> None:
    """Train with an explicit distributed loop, reporting to ``timer`` like ``fit`` would.

    Keras 3's ``fit`` cannot run under MultiWorkerMirroredStrategy (it reduces scalar
    metrics across workers along axis 0 and fails), so multi-worker runs use the loop
    TensorFlow documents for this strategy: per-example loss averaged over the GLOBAL
    batch, regularisation scaled by the replica count, gradients all-reduced by the
    optimizer, the loss summed across replicas for reporting.
    """
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    optimizer = model.optimizer
    with strategy.scope():
        optimizer.build(model.trainable_variables)
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            objective = optimizer.scale_loss(loss) if scaled else loss
        grads = tape.gradient(objective, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(iterator: Any) -> Any:
        per_replica = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(strategy.experimental_distribute_dataset(train_ds))
    for epoch in range(epochs):
        timer.on_epoch_begin(epoch)
        loss = None
        for step in range(steps):
            timer.on_train_batch_begin(step)
            loss = train_step(iterator)
            # The timer reads its clock only once this loss is on the host: the
            # call above returns when the step is queued, not when it is done.
            timer.on_train_batch_end(step, {"loss": loss})
        timer.on_epoch_end(epoch, {"loss": loss})


def evaluate_custom_loop(model: Any, strategy: Any, test_ds: Any) -> float:
    """Test accuracy over all workers' shards: correct predictions summed across replicas."""
    import tensorflow as tf

    @tf.function
    def eval_step(x: Any, y: Any) -> Any:
        predictions = tf.argmax(model(x, training=False), axis=-1, output_type=tf.int32)
        return tf.reduce_sum(tf.cast(tf.equal(predictions, tf.cast(y, tf.int32)), tf.int64))

    correct = total = 0
    for x, y in strategy.experimental_distribute_dataset(test_ds):
        correct += int(strategy.reduce("SUM", strategy.run(eval_step, args=(x, y)), axis=None))
        sizes = strategy.run(lambda t: tf.shape(t, out_type=tf.int64)[0], args=(y,))
        total += int(strategy.reduce("SUM", sizes, axis=None))
    return correct / total if total else float("nan")
