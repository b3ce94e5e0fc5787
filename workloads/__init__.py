"""TensorFlow GPU-host workloads: benchmarks and studies run inside the project images."""

__version__ = "0.1.0"
