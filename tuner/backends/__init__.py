"""The GPU targets a kernel is generated for, and everything that differs between them.

Each backend is an object (tuner/backends/base.py) defined in a module of its own: numba-cuda in
cuda.py, numba-hip in hip.py. Nothing outside them tells the backends apart by name; callers ask
the object (its limits, features, driver, device description). Numba's CUDA simulator is a
runtime that either backend's source can run on (tuner/simulator.py).
"""
from .base import Backend, DriverForked, Limits, NoDevice
from .cuda import CUDA
from .hip import ROC

__all__ = ["BACKENDS", "CUDA", "ROC", "SIMULATOR_DEFAULT", "Backend", "DriverForked", "Limits", "NoDevice", "by_module",
           "get_backend"]

BACKENDS = {backend.name: backend for backend in (CUDA, ROC)}
SIMULATOR_DEFAULT = CUDA.name  # the backend the simulator stands in for when none is named


def get_backend(name: str) -> Backend:
    """The backend called `name`, or a ValueError that lists the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}") from None


def by_module(module: str) -> Backend:
    """The backend whose kernels import numba.`module` ("cuda", "hip")."""
    return next(backend for backend in BACKENDS.values() if backend.module == module)
