"""Static ceilings: which configurations are worth device time, known before any is spent.

A configuration's ceiling is its fma_fraction (tuner/resources.py): the share of multiply-adds
among the instructions one interior k-tile issues, a bound on its fraction of the FP32 (FP64) peak.
The search does not measure a configuration whose ceiling is below half of the ceiling of the
fastest variant its study has measured (the shape's winner, so small tiles stay in play for thin
products), unless the study has nothing better left. A ceiling costs a count (PTX, ptxas,
nvdisasm) made right after Numba compiles the kernel, on an sm_90 GPU from the IR Numba kept for it
(compile_ahead.compile_and_count): in a compile worker, else in the measuring process, which then
measures the kernel it compiled (kernel.import_source keeps the module and its Numba dispatcher in
memory). It is kept on disk per template and configuration. Only numba-cuda outside the
simulator, with nvdisasm, can count; elsewhere nothing is pruned.
Tensor-core kernels have no ceiling: an HMMA keeps its pipe busy for several cycles, so its share
of the issued instructions bounds nothing.
"""
import json
import warnings
from pathlib import Path
from typing import Callable

from .disk import locked, read_regular_file, write_atomically
from .config import Config
from .devices import templates_hash
from .kernel import kernel_dir
from .runtime import Runtime
from .space import Space
from .trials import MAX_UNMEASURED_IN_A_ROW, config_key

PRUNE_BELOW = 0.5  # of the ceiling of the fastest variant measured in the study
# Suggestions in a row that were not measured after which the study has nothing better left, and
# configurations are measured whatever their ceiling: half as many as end a run.
NOTHING_BETTER_LEFT = MAX_UNMEASURED_IN_A_ROW // 2
NOT_COUNTED = object()  # Ceilings.of: no count was made elsewhere
# The most a ceilings file may hold: a whole valid space counted (about 31,000 configurations) takes 8 MB.
MAX_BYTES = 64 << 20


class CeilingsFileWarning(UserWarning):
    """A ceilings file that could not be read was ignored; its ceilings are counted again."""


class NotCompiled(Exception):
    """The kernel did not compile where its ceiling was to be counted: it has no ceiling, and none is
    kept, as the failure may pass (a MemoryError, a broken context); measured, it fails with the reason."""


class Ceilings:
    """The ceilings of one space's configurations, counted once each and kept in a JSON file."""

    def __init__(self, path: Path, count: Callable[[Config], float | None]):
        self.path, self.count = path, count
        self.known = _read(path, warn=True)

    @classmethod
    def where_countable(cls, runtime: Runtime, space: Space, root: Path) -> "Ceilings | None":
        """The ceilings of `space` kept under `root`, or None where they cannot be counted."""
        from .resources import CountUnavailable, ptxas_path
        from .sass import NoDisassembler, nvdisasm_beside

        if runtime.simulated or not space.backend.counts_resources or space.precision.tensor_cores:
            return None
        try:
            nvdisasm_beside(ptxas_path())
        except (CountUnavailable, NoDisassembler):
            return None
        name = f"{space.backend.name}-{space.family.name}-{space.precision.name}-{templates_hash()}.json"
        return cls(root / "ceilings" / name, lambda config: _fma_fraction(space, config, kernel_dir(root)))

    def of(self, config: Config, counted: float | None | object = NOT_COUNTED) -> float | None:
        """`config`'s ceiling: known, else `counted` (a compile worker's count, None where it could
        not count), else counted now; None if it cannot be counted (kept), or not now (NotCompiled)."""
        key = config_key(config.as_dict())
        if key not in self.known:
            try:
                self.known[key] = self.count(config) if counted is NOT_COUNTED else counted
            except NotCompiled:
                return None
            self._save()
        return self.known[key]

    def _save(self) -> None:
        """Write the counts atomically, merged under the file's lock with those that other searches
        on this host (`--devices` workers) have written since, so that no count is lost; the temporary
        file a writer killed before its rename left is removed."""
        with locked(self.path):
            self.known = {**_read(self.path), **self.known}
            write_atomically(self.path, json.dumps(self.known).encode())


def _read(path: Path, warn: bool = False) -> dict:
    """The ceilings kept in `path`. The file only saves counting again, so one that cannot be read
    (not a regular file, over MAX_BYTES, not a JSON object: edited by hand, or planted) counts as
    empty, said in a warning where `warn`, and is written over at the next count; an entry that is
    neither a number nor None (cannot be counted) is dropped."""
    try:
        raw = read_regular_file(path, MAX_BYTES)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"over {MAX_BYTES} bytes")
        known = json.loads(raw)
        if not isinstance(known, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as error:
        if warn:
            warnings.warn(f"tuner: the ceilings file {path} cannot be read ({type(error).__name__}: "
                          f"{str(error)[:200]}); it is ignored and written over, and its ceilings are counted again",
                          CeilingsFileWarning, stacklevel=3)
        return {}
    return {key: value for key, value in known.items()
            if value is None or isinstance(value, (int, float)) and not isinstance(value, bool)}


def _fma_fraction(space: Space, config: Config, kernels: Path) -> float | None:
    """`config`'s ceiling, counted as a counting worker counts it (compile_and_count), its kernel
    kept compiled in this process (and in Numba's disk cache) for its measurement; None where it
    cannot be counted; NotCompiled where the kernel does not compile."""
    from .compile_ahead import compile_and_count

    try:
        resources = compile_and_count(space, config, kernels)
    except OSError:
        raise  # the kernel directory or the disk: the search stops, as it does for a compile
    except Exception as error:
        raise NotCompiled(str(error)) from error
    return (resources or {}).get("fma_fraction")


def why_not_measure(ceiling: float | None, best: float | None, unmeasured_in_a_row: int) -> str:
    """Why a configuration with this ceiling is not worth device time, given the ceiling of the
    fastest variant measured in the study; empty when it is."""
    if ceiling is None or best is None or unmeasured_in_a_row >= NOTHING_BETTER_LEFT:
        return ""
    if ceiling < PRUNE_BELOW * best:
        return (f"static ceiling {ceiling:.2f} (fma_fraction) is below half of {best:.2f}, the ceiling of the "
                "fastest variant measured in the study")
    return ""
