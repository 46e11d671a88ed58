"""Cache records measured for this project on real GPUs; they ship read-only with tuner."""
