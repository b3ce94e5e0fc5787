"""CIFAR-10 training benchmark: data, models, the timed training loop and its CLI."""
