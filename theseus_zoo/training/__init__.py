"""The run: trainer, checkpoints, optimization, losses, sweeps, analyses and timing."""
