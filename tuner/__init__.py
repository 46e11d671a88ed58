"""tuner: generates tiled-matmul kernels for Numba (CUDA and ROC) from Jinja2 templates, tunes them
on the GPU, and serves the tuned kernels to programs: `tuner.matmul(A, B)`."""
from .config import Config, WarpConfig
from .space import SEED, Space
from .tuned import OtherSoftwareWarning, SkippedRecordWarning, TunedKernel, UntunedWarning, get_kernel, matmul, reload

# The name it is installed under: "tuner" on the package index is an unrelated project.
DISTRIBUTION = "numba-matmul-tuner"

__all__ = ["Config", "OtherSoftwareWarning", "SEED", "Space", "SkippedRecordWarning", "TunedKernel", "UntunedWarning",
           "WarpConfig", "get_kernel", "matmul", "reload"]
