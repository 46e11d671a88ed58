"""The matmul family: one C = alpha * A @ B + beta * C on 2-D operands."""
from ..family import Family

FAMILY = Family()
