"""Synthetic input on any Keras backend: one random batch, repeated, already on the device.

The model alone, with no input cost: the batch is drawn once (seeded) and converted to
the backend's tensor once, so a step moves no data from the host. TensorFlow runs use
``tf.data`` instead (:func:`workloads.cifar10.data.synthetic_dataset`), which a
``tf.distribute`` strategy needs to split a batch across replicas; every other backend
(JAX on a host without TensorFlow) gets this ``keras.utils.PyDataset``, so ``workloads
cifar10 --data synthetic`` and the battery's training row import no TensorFlow there.
Keras is imported when a batch is made, not with this module, so the CLI can check its
input before any framework loads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.cifar10.data import NUM_CLASSES


def random_batch(
    global_batch: int, image_size: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels): standard-normal float32 images, uniform int32 class ids."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((global_batch, image_size, image_size, 3)).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, size=(global_batch,)).astype(np.int32)
    return x, y


def repeated_batch(x: Any, y: Any, steps: int) -> Any:
    """A ``keras.utils.PyDataset`` of ``steps`` batches per epoch, each ``(x, y)`` on the device."""
    import keras

    class RepeatedBatch(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.x = keras.ops.convert_to_tensor(x)
            self.y = keras.ops.convert_to_tensor(y)

        def __len__(self) -> int:
            return steps

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            return self.x, self.y

    return RepeatedBatch()
