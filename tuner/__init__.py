"""tuner: generates tiled-matmul kernels for Numba (CUDA and ROC) from Jinja2 templates, tunes them
on the GPU, and serves the tuned kernels to programs: `tuner.matmul(A, B)`.

The public names are loaded when first used, so that the command line starts, and takes Ctrl-C
quietly, without first importing NumPy and Numba."""
import importlib as _importlib
import importlib.util as _importlib_util

# The name it is installed under: "tuner" on the package index is an unrelated project.
DISTRIBUTION = "numba-matmul-tuner"

# Each public name, and the module of this package that defines it.
_PUBLIC = {"Config": "config", "WarpConfig": "config", "SEED": "space", "Space": "space",
           **dict.fromkeys(("OtherSoftwareWarning", "SkippedRecordWarning", "TunedKernel", "UntunedWarning",
                            "get_kernel", "matmul", "reload"), "tuned")}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    """A public name, imported from its module at its first use; `__version__`; a submodule, imported
    as `import tuner.name` would (not `__main__`, which would run the command line, nor another
    private one)."""
    if name == "__version__":  # read at first use: the installed distribution's metadata
        from importlib import metadata

        try:
            return metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return "unknown (not installed)"
    if name in _PUBLIC:
        value = getattr(_importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value
        return value
    if name.isidentifier() and not name.startswith("_") and _importlib_util.find_spec(f".{name}", __name__):
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({name for name in globals() if not name.startswith("_") or name.startswith("__")}
                  | {*__all__, "__version__"})
