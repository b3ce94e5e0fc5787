"""The battery's short training run: ResNet50V2 at 128 px on a GPU, the tutorial CNN on a CPU.

The benchmark's own models (:mod:`workloads.cifar10.models`), step timer and FLOP
counter, on one device, mixed precision (float16 on GPUs as ``cifar10 --precision
mixed``; bfloat16 on CPUs that compute it natively, else float32), XLA on GPUs.
The data is one synthetic batch repeated through a ``keras.utils.PyDataset``, so
the run needs no TensorFlow input pipeline and works on a JAX-only host.
Three epochs: the first (compilation, autotuning) is left out of the figures. The
epochs are timed whole (:class:`~workloads.cifar10.timing.EpochTimer`), so the steps
run as ``fit`` runs them, with no per-step wait on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

EPOCHS = 3  # the first compiles and is left out


@dataclass(frozen=True)
class TrainingResult:
    model: str
    image_size: int
    batch_size: int
    dtype_policy: str
    xla: bool
    examples_per_sec: float
    step_time_s: float
    steps_measured: int
    flops_per_example: float | None
    flops_method: str | None


def run(on_gpu: bool, batch_size: int, steps: int) -> TrainingResult:
    import keras
    import numpy as np

    from workloads.cifar10.models import MODELS
    from workloads.cifar10.synthetic import repeated_batch
    from workloads.cifar10.timing import EpochTimer, steady_epochs
    from workloads.envinfo import cpu_bf16_flags
    from workloads.roofline import flops_per_example

    spec = MODELS["resnet50v2" if on_gpu else "cnn"]
    size = spec.crop or spec.image_size
    cpu_policy = "mixed_bfloat16" if cpu_bf16_flags() else "float32"
    policy = "mixed_float16" if on_gpu else cpu_policy
    xla = on_gpu or keras.backend.backend() == "jax"
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        model = spec.build(size)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
            loss=loss,
            jit_compile=xla,
        )
        rng = np.random.default_rng(0)
        x = rng.random((batch_size, size, size, 3), dtype=np.float32)
        y = rng.integers(0, 10, size=(batch_size,)).astype("int32")
        timer = EpochTimer()
        model.fit(repeated_batch(x, y, steps), epochs=EPOCHS, callbacks=[timer], verbose=0)
        stats = steady_epochs(timer.epoch_times, steps, batch_size)
        try:
            flops, method = flops_per_example(model, loss)
        except Exception:  # the throughput stands without it
            flops, method = None, None
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    return TrainingResult(
        spec.name,
        size,
        batch_size,
        policy,
        xla,
        stats.examples_per_sec,
        stats.step_time_s,
        stats.steps_measured,
        flops,
        method,
    )
