"""tuner: generates tiled-matmul kernels for Numba (CUDA and ROC) from Jinja2 templates and tunes them."""
from .config import Config
from .space import SEED, Space

__all__ = ["Config", "SEED", "Space"]
