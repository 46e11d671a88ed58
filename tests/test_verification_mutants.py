"""bench/verification_mutants.py, which a GPU session runs: its planted bugs still occur in the kernels
rendered now (else its run reports them stale), and what it counts as caught."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import verification_mutants  # noqa: E402
from verification_mutants import MUTATIONS, verdict  # noqa: E402

PLANTED = [mutation for mutation in MUTATIONS if not mutation.control]


@pytest.mark.parametrize("mutation", PLANTED, ids=[mutation.name for mutation in PLANTED])
def test_each_planted_bug_occurs_in_the_kernel_rendered_now(mutation):
    assert verification_mutants.occurrences(mutation)


def test_each_planted_bug_has_a_control_of_its_kernel():
    """A mutant counts as caught only beside a control of the same family, precision and configuration
    that passes, so that the check, not the configuration, is what fails it."""
    def kernel(mutation):
        return mutation.family, mutation.precision, mutation.config

    controls = {kernel(mutation) for mutation in MUTATIONS if mutation.control}
    assert [mutation.name for mutation in PLANTED if kernel(mutation) not in controls] == []


def _row(edge: str, served: str = "") -> dict:
    return {name: {"failed": bool(reason), "reason": reason, "raised": False}
            for name, reason in (("edge", edge), ("served", served))}


def test_a_mutant_that_writes_past_c_is_caught_on_a_gpu_only_by_the_guard_band():
    control, rows = MUTATIONS[0], next(mutation for mutation in PLANTED if mutation.past_the_end)
    wrong = "at 17x18x19 with alpha -0.75 and beta 0: relative error 0.3 exceeds 1e-04"
    past = "at 17x18x19 with alpha -0.75 and beta 0: wrote past the end of C: 18 of the 50 elements after it"
    assert verdict(control, _row(""), simulated=False) == ""
    assert verdict(control, _row("", wrong), simulated=False) == "the unmutated kernel failed"
    assert verdict(rows, _row(""), simulated=True) == "not caught"
    assert verdict(rows, _row(wrong), simulated=True) == ""
    assert verdict(rows, _row(wrong), simulated=False) == "the guard band did not fail it"
    assert verdict(rows, _row(wrong, past), simulated=False) == ""
    assert verdict(rows, {"stale": True}, simulated=False).startswith("stale")
