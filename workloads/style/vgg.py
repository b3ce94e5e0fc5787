"""VGG19 as a feature extractor: only the layers the losses read, optionally avg-pooled.

The keras-io example runs the whole network and every layer's output each step;
here the graph stops at block5_conv2, the last layer any loss uses, so the three
last convolutions and the last pooling are never computed. ``--pooling avg``
replaces each max-pooling with average pooling of the same window (Gatys et al.
found it gives smoother results); the convolutions and their weights are shared
with the loaded network, so the swap needs no second copy of the weights.

``--precision bfloat16`` builds the network under Keras' ``mixed_bfloat16``
policy: the convolutions and poolings compute in bfloat16 (float32 weights, cast
on use), and every feature the losses read is cast back to float32, so the Gram
matrices, the losses, the gradient's image and Adam stay in float32. On a CPU
with AVX512-BF16 or AMX, or a GPU with bfloat16 tensor cores, the convolutions,
nearly all of an iteration's FLOPs, then run at the bfloat16 matmul rate.
"""

from __future__ import annotations

from typing import Any

from workloads.errors import WorkloadError, clip
from workloads.style.config import CONTENT_LAYERS, STYLE_LAYERS
from workloads.style.weights import WeightsSource

# VGG19 without its classifier: (layer name, kind, output channels), in order.
VGG19_LAYERS: tuple[tuple[str, str, int], ...] = tuple(
    (f"block{block}_{name}", kind, channels)
    for block, (convs, channels) in enumerate(
        [(2, 64), (2, 128), (4, 256), (4, 512), (4, 512)], start=1
    )
    for name, kind in [*((f"conv{i}", "conv") for i in range(1, convs + 1)), ("pool", "pool")]
)

# The extractor's outputs, in this order: content layers first, then style layers.
OUTPUT_LAYERS = CONTENT_LAYERS + STYLE_LAYERS


def layers_used() -> list[tuple[str, str, int]]:
    """VGG19's layers up to and including the last one a loss reads."""
    last = max(i for i, (name, _, _) in enumerate(VGG19_LAYERS) if name in OUTPUT_LAYERS)
    return list(VGG19_LAYERS[: last + 1])


# --precision → the Keras dtype policy VGG19's layers are built with.
DTYPE_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def load_vgg19(source: WeightsSource, seed: int, precision: str = "float32") -> Any:
    """keras.applications.VGG19 without top, any input size, weights from ``source``.

    keras.applications takes no dtype argument, so the layers get ``precision``'s
    policy from Keras' global setting, set only while they are built.
    """
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(DTYPE_POLICIES[precision])
    try:
        model = keras.applications.VGG19(
            include_top=False, weights=None, input_shape=(None, None, 3)
        )
    finally:
        keras.config.set_dtype_policy(previous)
    if source.kind == "random":
        randomise(model, seed)
    if source.path is not None:
        try:
            model.load_weights(str(source.path))
        except Exception as exc:  # h5py, ValueError on layer/shape mismatch, ...
            reason = clip(str(exc), 40) or type(exc).__name__
            raise WorkloadError(
                f"{source.path} is not Keras VGG19 no-top weights ({reason})",
                "use --weights imagenet",
            ) from exc
    return model


# Per-layer gain over He init for --weights random. He init alone keeps activations
# at the input's scale (RMS ~60 at relu4_2 for the sample image); the ImageNet weights
# give larger ones: neural-style issue #172 shows a content loss of 1.6e5 at content
# weight 5, an RMS relu4_2 difference of ~180. A gain of 1.1 per layer gives ~155
# there, so the content/style terms outweigh the TV term as they do with real weights.
RANDOM_GAIN = 1.1


def randomise(model: Any, seed: int) -> None:
    """Seeded He-normal kernels (times :data:`RANDOM_GAIN`) and zero biases.

    Keras' default Glorot init halves the activations' energy per ReLU layer, so
    by relu4_2 the content and style losses vanish under the TV term and the
    optimisation no longer resembles a real run. NumPy's generator makes the
    weights identical on every Keras backend.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if not layer.weights:
            continue
        kernel, bias = layer.weights
        shape = tuple(kernel.shape)
        fan_in = int(np.prod(shape[:-1]))
        scale = RANDOM_GAIN * np.sqrt(2.0 / fan_in)
        kernel.assign((rng.standard_normal(shape) * scale).astype("float32"))
        bias.assign(np.zeros(tuple(bias.shape), dtype="float32"))


def build_extractor(base: Any, pooling: str = "max") -> Any:
    """A model from the image to the outputs named in :data:`OUTPUT_LAYERS`.

    Replays ``base``'s layers on a new input, stopping after the last layer used and
    swapping max for average pooling when asked. Layers are reused, not copied, so
    the extractor shares ``base``'s weights, and its compute dtype; each output is
    cast to float32 for the losses. Every pooling uses ``same`` padding, as
    neural-style's does: Keras' VGG19 pools with ``valid``, which drops the last row
    or column of any odd side, so at most widths (a side not divisible by 16) the
    deeper layers would never see the image's border.
    """
    import keras

    wanted = set(OUTPUT_LAYERS)
    inputs = keras.Input(shape=(None, None, 3), name="image")
    x = inputs
    found: dict[str, Any] = {}
    for layer in base.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, keras.layers.MaxPooling2D):
            pool = keras.layers.AveragePooling2D if pooling == "avg" else keras.layers.MaxPooling2D
            name = layer.name.replace("pool", "avgpool") if pooling == "avg" else layer.name
            x = pool(
                pool_size=layer.pool_size,
                strides=layer.strides,
                padding="same",
                name=name,
                dtype=layer.dtype_policy,
            )(x)
        else:
            x = layer(x)
        if layer.name in wanted:
            found[layer.name] = (
                x
                if x.dtype == "float32"
                else keras.layers.Activation("linear", dtype="float32", name=f"{layer.name}_f32")(x)
            )
        if len(found) == len(wanted):
            break
    model = keras.Model(inputs, [found[name] for name in OUTPUT_LAYERS], name=f"vgg19_{pooling}")
    model.trainable = False
    return model
