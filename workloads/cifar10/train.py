"""The CIFAR-10 benchmark run: devices and strategy, data, model, timed fit, record.

Multi-GPU follows the seeds: ``tf.distribute.MirroredStrategy`` over the first
N visible GPUs, a per-replica batch (global = batch x replicas), the learning
rate scaled linearly with the replica count, the last partial batch dropped, and
the model saved from the one model object (no parallel wrapper to unwrap).
Importing this module imports Keras; callers set KERAS_BACKEND before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads import netbind, safefs
from workloads.cifar10 import data as cifar_data
from workloads.cifar10 import multiworker, synthetic
from workloads.cifar10.models import MODELS, ModelSpec
from workloads.cifar10.multiworker import SlurmTask, wants_slurm
from workloads.cifar10.source import DataSource, choose_data
from workloads.cifar10.timing import StepTimer, steady_state
from workloads.envinfo import cpu_bf16_flags
from workloads.errors import OutOfMemory, WorkloadError, is_out_of_memory

TRAIN_IMAGES = 50_000

# The fast CPU path, as measured on a 2-core AVX512-BF16 EPYC (docs/benchmarks.md):
# bfloat16 compute 1.5-1.9x float32 for the CNN; XLA on the CPU 5x SLOWER (its CPU
# convolutions are not oneDNN's), so it stays off; 10 steps per execution gained
# nothing measurable at batch 128 (a step is ~0.3 s, the Python round trip ~1 ms),
# so it stays at 1. Thread settings are TensorFlow's defaults (one per core).
FAST_CPU_STEPS_PER_EXECUTION = 1


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a run; stored verbatim in the record's ``params``."""

    model: str = "cnn"
    data: str = "synthetic"
    data_dir: str | None = None
    epochs: int = 2
    steps_per_epoch: int | None = None
    batch_size: int = 128
    gpus: int | None = None
    cpu_replicas: int = 1
    precision: str = "fp32"
    xla: bool = False
    steps_per_execution: int = 1
    image_size: int | None = None
    learning_rate: float = 0.01
    log_every: int = 10
    seed: int = 0
    save_model: str | None = None
    distributed: str = "auto"
    fast_cpu: bool = False


@dataclass
class Placement:
    """Where the replicas run, and the strategy that puts them there."""

    strategy: Any
    replicas: int
    device_names: list[str]
    gpu_count: int
    slurm: SlurmTask | None = None

    @property
    def is_chief(self) -> bool:
        return self.slurm is None or self.slurm.is_chief


def backend_name() -> str:
    import keras

    return str(keras.backend.backend())


def place(config: TrainConfig) -> Placement:
    """Choose devices and the distribution strategy, validating --gpus/--cpu-replicas."""
    # Where this SLURM worker listens (workloads cifar10 made it re-execute already).
    binding = multiworker.bind_to_node() if wants_slurm(config.distributed) else None
    backend = backend_name()
    from workloads.envinfo import cpu_model

    if backend != "tensorflow":
        if (config.gpus or 0) > 1 or config.cpu_replicas > 1:
            raise WorkloadError(
                f"several replicas need the tensorflow backend (KERAS_BACKEND={backend})",
                "unset KERAS_BACKEND or use one device",
            )
        return Placement(contextlib.nullcontext(), 1, [_single_device_name(backend)], 0)

    if binding is not None:
        import tensorflow as tf

        return _place_slurm(tf, config, binding)

    import tensorflow as tf

    from workloads.devices import require_supported, setup_tensorflow

    gpus = setup_tensorflow(tf, cpu_replicas=config.cpu_replicas if config.gpus is None else 1)
    require_supported(gpus)
    if gpus and config.cpu_replicas > 1:
        raise WorkloadError(
            "--cpu-replicas is for hosts without a GPU, and GPUs are visible",
            "use --gpus N, or hide the GPUs with CUDA_VISIBLE_DEVICES=",
        )
    wanted = len(gpus) if config.gpus is None else config.gpus
    if wanted > len(gpus):
        raise WorkloadError(
            f"--gpus {wanted} but only {len(gpus)} GPU(s) visible",
            f"use --gpus {len(gpus)} or fewer" if gpus else "drop --gpus to run on the CPU",
        )
    if wanted >= 1:
        chosen = gpus[:wanted]
        names = [g.name for g in chosen]
        devices = [f"/gpu:{g.index}" for g in chosen]
        strategy = (
            tf.distribute.MirroredStrategy(devices)
            if wanted > 1
            else tf.distribute.OneDeviceStrategy(devices[0])
        )
        return Placement(strategy, wanted, names, wanted)
    if config.cpu_replicas > 1:
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][: config.cpu_replicas]
        strategy = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
        return Placement(strategy, len(devices), [cpu_model()] * len(devices), 0)
    return Placement(tf.distribute.get_strategy(), 1, [cpu_model()], 0)


def _place_slurm(tf: Any, config: TrainConfig, binding: netbind.Binding) -> Placement:
    """One worker per SLURM task, MultiWorkerMirroredStrategy over all of them."""
    from workloads.devices import require_supported, setup_tensorflow
    from workloads.envinfo import cpu_model

    if config.gpus is not None or config.cpu_replicas > 1:
        raise WorkloadError(
            "--gpus/--cpu-replicas do not apply to SLURM multi-worker runs",
            "ask SLURM for the GPUs (--gres=gpu:N, --ntasks-per-node) and drop these options",
        )
    resolver, task = multiworker.resolve(tf, binding)
    task = dataclasses.replace(task, binding=binding)
    gpus = setup_tensorflow(tf)
    require_supported(gpus)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    local = [g.name for g in gpus] or [cpu_model()]
    return Placement(
        strategy, int(strategy.num_replicas_in_sync), local * task.workers, len(gpus), slurm=task
    )


def _single_device_name(backend: str) -> str:
    from workloads.envinfo import cpu_model

    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return str(getattr(device, "device_kind", device.platform))
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    return cpu_model()


def fast_cpu_config(config: TrainConfig) -> tuple[TrainConfig, dict[str, Any]]:
    """The configuration measured fastest on a CPU, and the facts the record keeps about it.

    bfloat16 only where the CPU computes it natively; elsewhere it is emulated and
    slower than float32, so the run stays float32.
    """
    flags = cpu_bf16_flags()
    precision = "mixed" if flags else "fp32"
    chosen = dataclasses.replace(
        config, precision=precision, xla=False, steps_per_execution=FAST_CPU_STEPS_PER_EXECUTION
    )
    facts = {
        "applies": not accelerator_visible(),
        "precision": precision,
        "dtype_policy": "mixed_bfloat16" if flags else "float32",
        "xla": False,
        "steps_per_execution": FAST_CPU_STEPS_PER_EXECUTION,
        "cpu_bf16_flags": flags,
        "reason": (
            f"bfloat16: the CPU has {', '.join(flags)}"
            if flags
            else "float32: no AVX512-BF16/AMX, bfloat16 would be emulated"
        )
        + f"; XLA off (slower on CPUs); steps_per_execution {FAST_CPU_STEPS_PER_EXECUTION}",
    }
    return chosen, facts


def accelerator_visible() -> bool:
    """Whether the Keras backend sees a GPU (the fast CPU path is for CPU-only hosts)."""
    backend = backend_name()
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    if backend == "jax":
        import jax

        return jax.devices()[0].platform != "cpu"
    if backend == "torch":
        import torch

        return bool(torch.cuda.is_available())
    return False


def set_precision(config: TrainConfig, placement: Placement) -> str:
    """Set the Keras dtype policy: float16 on GPUs, bfloat16 on CPUs (where it helps)."""
    import keras

    if config.precision == "fp32":
        policy = "float32"
    else:
        policy = "mixed_float16" if placement.gpu_count else "mixed_bfloat16"
    keras.mixed_precision.set_dtype_policy(policy)
    return policy


def make_datasets(
    config: TrainConfig, spec: ModelSpec, global_batch: int, source: DataSource
) -> tuple[Any, Any | None, int, dict[str, Any]]:
    """Training dataset, optional test dataset, steps per epoch, and data facts for the record.

    Synthetic data on a backend other than TensorFlow is a ``PyDataset`` of one batch on
    the device (:mod:`workloads.cifar10.synthetic`): no TensorFlow is imported, so a
    JAX-only host runs it. The archive's pipeline is ``tf.data``.
    """
    image_size = config.image_size or spec.image_size
    crop = (config.image_size or spec.crop) if spec.crop else None
    facts: dict[str, Any] = {"data": source.kind, "image_size": image_size}
    if source.fallback_reason is not None:
        facts["data_fallback_reason"] = source.fallback_reason
    if source.cifar is None:
        steps = config.steps_per_epoch or TRAIN_IMAGES // global_batch
        if steps == 0:
            raise _batch_too_large(global_batch, TRAIN_IMAGES)
        if backend_name() != "tensorflow":
            x, y = synthetic.random_batch(global_batch, image_size, config.seed)
            return synthetic.repeated_batch(x, y, steps), None, steps, facts
        import tensorflow as tf

        train = cifar_data.synthetic_dataset(
            tf, global_batch=global_batch, image_size=image_size, seed=config.seed
        )
        return train, None, steps, facts
    import tensorflow as tf
    cifar, archive = source.cifar, source.archive
    full_steps = len(cifar.x_train) // global_batch
    if full_steps == 0 or len(cifar.x_test) // global_batch == 0:
        raise _batch_too_large(global_batch, min(len(cifar.x_train), len(cifar.x_test)))
    facts["archive"] = str(archive)
    train = cifar_data.real_dataset(
        tf,
        cifar.x_train,
        cifar.y_train,
        global_batch=global_batch,
        image_size=image_size,
        crop=crop,
        train=True,
        seed=config.seed,
    )
    test = cifar_data.real_dataset(
        tf,
        cifar.x_test,
        cifar.y_test,
        global_batch=global_batch,
        image_size=image_size,
        crop=crop,
        train=False,
    )
    facts["test_examples"] = (len(cifar.x_test) // global_batch) * global_batch
    return train, test, config.steps_per_epoch or full_steps, facts


def _batch_too_large(global_batch: int, available: int) -> WorkloadError:
    return WorkloadError(
        f"global batch {global_batch} is larger than the {available} images available",
        "lower --batch-size (it is per replica) or use fewer replicas",
    )


def build_model(config: TrainConfig, spec: ModelSpec, placement: Placement, image_size: int) -> Any:
    import keras

    backend = backend_name()
    scaled_lr = config.learning_rate * placement.replicas
    with _scope(placement.strategy):
        model = spec.build(image_size)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=scaled_lr, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=xla_mode(config, backend, placement.replicas) == "jit_compile",
            steps_per_execution=config.steps_per_execution,
        )
    return model


def xla_mode(config: TrainConfig, backend: str, replicas: int) -> str:
    """How XLA is used: ``jit_compile``, ``autoclustering`` or ``off``.

    JAX always compiles; torch.compile is not a benchmark default. On TensorFlow,
    Keras 3 compiles the whole ``strategy.run`` step with ``jit_compile``, which XLA
    cannot place across several replicas' devices, so multi-replica runs get XLA
    through TensorFlow's auto-clustering of the per-replica graphs instead.
    """
    if backend == "jax":
        return "jit_compile"
    if backend == "torch" or not config.xla:
        return "off"
    return "jit_compile" if replicas == 1 else "autoclustering"


def _scope(strategy: Any) -> Any:
    return strategy.scope() if hasattr(strategy, "scope") else strategy


def train(
    config: TrainConfig, record: dict[str, Any], source: DataSource | None = None
) -> dict[str, Any]:
    """Run the benchmark and fill ``record`` with its figures; returns the record.

    ``source`` is the data ``workloads cifar10`` resolved before TensorFlow loaded;
    other callers leave it out and it is resolved here from ``config``.
    """
    import keras

    spec = MODELS[config.model]
    keras.utils.set_random_seed(config.seed)
    placement = place(config)
    if config.fast_cpu:
        if placement.gpu_count or accelerator_visible():
            raise WorkloadError(
                "--fast-cpu is for hosts without a GPU, and a GPU is visible",
                "drop --fast-cpu (on GPUs use --precision mixed --xla), "
                "or hide the GPUs with CUDA_VISIBLE_DEVICES=",
            )
        config, record["fast_cpu"] = fast_cpu_config(config)
    global_batch = config.batch_size * placement.replicas
    policy = set_precision(config, placement)
    if source is None:
        source = choose_data(config.data, config.data_dir)
    train_ds, test_ds, steps, facts = make_datasets(config, spec, global_batch, source)
    backend = backend_name()
    record.update(
        model=config.model,
        backend=backend,
        devices=placement.device_names,
        replicas=placement.replicas,
        batch_size_per_replica=config.batch_size,
        global_batch_size=global_batch,
        learning_rate=config.learning_rate * placement.replicas,
        precision=config.precision,
        dtype_policy=policy,
        xla=xla_mode(config, backend, placement.replicas) != "off",
        xla_mode=xla_mode(config, backend, placement.replicas),
        steps_per_execution=config.steps_per_execution,
        steps_per_epoch=steps,
        epochs=config.epochs,
        **facts,
    )
    if placement.slurm is not None:
        record["distributed"] = {
            "mode": "slurm",
            "strategy": "MultiWorkerMirroredStrategy",
            "workers": placement.slurm.workers,
            "nodes": len(placement.slurm.nodes),
            "node_names": placement.slurm.nodes,
            "replicas_across_nodes": placement.replicas,
            "worker_bind": placement.slurm.binding.as_record() if placement.slurm.binding else None,
            "task_id": placement.slurm.task_id,
        }
    log_every = config.log_every if placement.is_chief else 0
    if record["xla_mode"] == "autoclustering":
        import tensorflow as tf

        tf.config.optimizer.set_jit("autoclustering")
    timer = StepTimer(
        global_batch=global_batch, log_every=log_every, announce_epochs=placement.is_chief
    )
    try:
        model = build_model(config, spec, placement, facts["image_size"])
        if placement.slurm is not None:
            multiworker.fit_custom_loop(
                model,
                placement.strategy,
                train_ds,
                epochs=config.epochs,
                steps=steps,
                global_batch=global_batch,
                timer=timer,
            )
            if test_ds is not None:
                record["accuracy"] = multiworker.evaluate_custom_loop(
                    model, placement.strategy, test_ds
                )
        else:
            model.fit(
                train_ds,
                epochs=config.epochs,
                steps_per_epoch=steps,
                callbacks=[timer],
                verbose=0,
                shuffle=False,
            )
            if test_ds is not None:
                _, accuracy = model.evaluate(test_ds, verbose=0)
                record["accuracy"] = float(accuracy)
    except Exception as exc:
        if is_out_of_memory(exc):
            raise OutOfMemory(
                f"out of memory with batch size {config.batch_size} per replica on "
                f"{', '.join(sorted(set(placement.device_names)))}",
                f"lower --batch-size (try {max(1, config.batch_size // 2)})",
            ) from exc
        raise
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    stats = steady_state(timer.epochs, global_batch)
    record.update(
        examples_per_sec=stats.examples_per_sec,
        examples_per_sec_mean=stats.examples_per_sec_mean,
        step_time_s=stats.step_time_s,
        steady_state_steps=stats.steps_measured,
        steady_state_excludes=stats.excluded,
        epoch_times_s=timer.epoch_times,
        epoch_losses=timer.losses,
    )
    record.setdefault("accuracy", None)
    record.update(roofline_fields(model, placement, policy, stats.examples_per_sec))
    if config.save_model:
        _save(model, config.save_model, placement)
        record["saved_model"] = config.save_model
    record["is_chief"] = placement.is_chief
    return record


def roofline_fields(
    model: Any, placement: Placement, policy: str, examples_per_sec: float
) -> dict[str, Any]:
    """``flops_per_example``, ``peak_flops``, ``peak`` and ``mfu`` (see workloads.roofline).

    ``peak`` says which peak the MFU divides by (``source``: the datasheet for a GPU in
    the reference table, else the measured one, ``provisional`` when it was measured
    on a busy host) and when it was measured. ``peak_flops`` is that of one device
    times the devices that compute in parallel:
    every GPU replica, but one CPU however many logical replicas it is split into
    (one per SLURM worker). A counter that fails leaves the fields empty and says
    why in ``roofline_error``; it never fails the run it describes.
    """
    import keras

    from workloads import roofline

    fields: dict[str, Any] = {"flops_per_example": None, "peak_flops": None, "mfu": None}
    dtype = roofline.compute_dtype(policy)
    try:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        with _scope(placement.strategy):
            flops, method = roofline.flops_per_example(model, loss)
        fields.update(flops_per_example=flops, flops_method=method)
        peak = roofline.mfu_peak(placement.device_names[0], dtype)
    except Exception as exc:  # a missing figure must not lose the record
        fields["roofline_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return fields
    if placement.gpu_count:
        parallel = placement.replicas
    elif placement.slurm is not None:
        parallel = placement.slurm.workers
    else:
        parallel = 1
    fields.update(
        peak_flops=peak["value"] * parallel,
        peak_flops_per_device=peak["value"],
        peak_dtype=peak["dtype"],
        peak_measured_at=peak["measured_at"],
        peak=peak,
    )
    fields["mfu"] = roofline.mfu(examples_per_sec, flops, fields["peak_flops"])
    note = roofline.peak_note(fields["mfu"], peak)
    if note:
        fields["roofline_note"] = note
        print(f"note: {note}", file=sys.stderr)
    return fields


def _save(model: Any, path: str, placement: Placement) -> None:
    """Save the one model object (no multi-GPU wrapper to unwrap: seed 003's lesson).

    Under MultiWorkerMirroredStrategy every worker must take part in saving; only the
    chief's copy is kept, the others write to a temporary directory.
    """
    # Keras writes by name: into a private directory, then checked and placed (safefs).
    with (safefs.staged(Path(path)) if placement.is_chief
          else safefs.scratch(Path(path).name)) as name:
        model.save(str(name))
