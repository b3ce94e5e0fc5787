"""The parameters of one style-transfer run and the numbers derived from them.

Defaults are the seed study's base point (elcorto/style_transfer_parameter_sweep),
not neural-style's own CLI defaults (content weight 5, style weight 500, blend 1):
the study is what this project reproduces and benchmarks.
Everything here is plain Python, so bad input is rejected before a framework loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workloads.errors import WorkloadError

# Keras' VGG19 layer names; their conv layers include the ReLU, so block4_conv2 is relu4_2.
CONTENT_LAYERS = ("block4_conv2", "block5_conv2")
STYLE_LAYERS = ("block1_conv1", "block2_conv1", "block3_conv1", "block4_conv1", "block5_conv1")

# Adam as neural-style configures TensorFlow's AdamOptimizer.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8

# The compute precisions of VGG's features (--precision); see vgg.load_vgg19.
PRECISIONS = ("auto", "float32", "bfloat16")

# neural-style's white-noise initialisation: N(0, 1) * 0.256 in mean-subtracted pixel units.
NOISE_SCALE = 0.256


@dataclass
class StyleConfig:
    """Every parameter of a run, named as in the seed study (underscores for dashes)."""

    content: Path
    styles: list[Path]
    output: Path
    width: int = 512
    iterations: int = 1000
    initial: str = "none"  # "none" (white noise), "content" or a path
    initial_noiseblend: float | None = None  # None: 1 for "none", 0 otherwise (neural-style)
    pooling: str = "max"
    content_weight: float = 1.0
    learning_rate: float = 10.0
    style_scales: list[float] = field(default_factory=lambda: [1.0])
    content_weight_blend: float = 0.2
    style_weight: float = 10.0
    tv_weight: float = 100.0
    style_layer_weight_exp: float = 1.0
    style_blend_weights: list[float] | None = None
    preserve_colors: bool = True
    seed: int = 0
    weights: str = "imagenet"
    xla: bool = False
    # VGG's features in "float32" or "bfloat16" (weights kept in float32; the image, Gram
    # matrices, losses and Adam in float32), or "auto": see resolve_precision.
    precision: str = "auto"
    keep: str = "last"  # which image is the output: the last iteration's or the lowest-loss one
    print_every: int = 10
    tolerance: float | None = None
    tolerance_window: int = 50
    checkpoint_every: int | None = None

    def validate(self) -> None:
        """Reject combinations argparse cannot see; each with the fix in the message."""
        if not self.styles:
            raise WorkloadError("no style image given", "pass at least one path to --styles")
        if len(self.style_scales) not in (1, len(self.styles)):
            raise WorkloadError(
                f"{len(self.style_scales)} --style-scales for {len(self.styles)} style images",
                "give one scale for all style images or one per style image",
            )
        if any(scale <= 0 for scale in self.style_scales):
            raise WorkloadError("--style-scales must be > 0", "use e.g. --style-scales 1")
        if self.style_blend_weights is not None:
            if len(self.style_blend_weights) != len(self.styles):
                raise WorkloadError(
                    f"{len(self.style_blend_weights)} --style-blend-weights for "
                    f"{len(self.styles)} style images",
                    "give exactly one weight per style image (in --styles order)",
                )
            if any(w < 0 for w in self.style_blend_weights) or sum(self.style_blend_weights) <= 0:
                raise WorkloadError(
                    "--style-blend-weights must be >= 0 and not all 0",
                    "use e.g. --style-blend-weights 0.7 0.3",
                )
        if self.pooling not in ("max", "avg"):
            raise WorkloadError(f"unknown pooling {self.pooling!r}", "use --pooling max or avg")
        if self.precision not in PRECISIONS:
            raise WorkloadError(
                f"unknown --precision {self.precision!r}",
                f"use --precision {' or '.join(PRECISIONS)}",
            )
        if self.keep not in ("last", "best"):
            raise WorkloadError(f"unknown --keep {self.keep!r}", "use --keep last or best")
        if self.output.suffix.lower() != ".png":
            raise WorkloadError(
                f"output {self.output} is not a .png file",
                "name the output image *.png, e.g. --output out.png (the record is out.json)",
            )

    @property
    def record_path(self) -> Path:
        """The JSON record beside the image: ``out.png`` → ``out.json``."""
        return self.output.with_suffix(".json")

    def scale_for(self, index: int) -> float:
        """The scale of style image ``index`` relative to the output's width."""
        return self.style_scales[index if len(self.style_scales) > 1 else 0]

    def noiseblend(self) -> float:
        """Share of white noise in the first image; neural-style's defaults when unset."""
        if self.initial_noiseblend is not None:
            return self.initial_noiseblend
        return 1.0 if self.initial == "none" else 0.0

    def checkpoint_path(self, iteration: int) -> Path:
        """``out.png`` → ``out-0100.png`` for iteration 100 (zero-padded to sort)."""
        digits = max(4, len(str(self.iterations)))
        return self.output.with_name(f"{self.output.stem}-{iteration:0{digits}d}.png")


def resolve_precision(requested: str, device: str, cpu_bf16: Sequence[str]) -> str:
    """The precision a run uses: ``auto`` is bfloat16 on a CPU that computes it natively.

    Measured on an AVX512-BF16 CPU (docs/benchmarks.md, `workloads bench style
    --precision float32 bfloat16`): 1.4-1.7x the float32 iterations/s with the last
    loss within 1 % of float32's from the same start, inside the 2 % bar for a
    default. On a CPU without AVX512-BF16/AMX bfloat16 is emulated and slower. On GPUs
    it has not been measured yet, so ``auto`` stays float32 there (TensorFlow already
    uses TF32 tensor cores for float32 convolutions on Ampere and newer).
    """
    if requested != "auto":
        return requested
    return "bfloat16" if device == "CPU" and cpu_bf16 else "float32"


def style_layer_weights(exponent: float) -> list[float]:
    """Weights of relu1_1 … relu5_1: each ``exponent`` times the one before, summing to 1.

    ``exponent`` 1 weighs all layers equally; below 1 favours fine textures (early
    layers), above 1 large structures. 0 keeps relu1_1 alone.
    """
    raw = [float(exponent) ** n for n in range(len(STYLE_LAYERS))]  # 0.0 ** 0 == 1
    total = sum(raw)
    return [w / total for w in raw]


def style_blend_weights(config: StyleConfig) -> list[float]:
    """One weight per style image, summing to 1 (equal when not given)."""
    given = config.style_blend_weights or [1.0] * len(config.styles)
    total = sum(given)
    return [w / total for w in given]
