"""The shipped H100 records' budget.measuring_seconds, computed again from their studies' journals
(the e2e and tensor tarballs here) as tuner/study_record.py computes it now: the measuring
process's load or compile, verify and time on each measured trial. The records were written before
a50754c, which summed each trial's whole duration, compile workers' waits included (1,594 s inside
a 150 s search). With --write, the records in cache/records/ get the new figure; nothing else in
them changes.

    python bench/results/h100/measuring_seconds.py [--write]   # from the repository root
"""
import json
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

from tuner.study_record import _measuring_seconds
from tuner.trials import is_measured

HERE = Path(__file__).resolve().parent
RECORDS = HERE.parents[2] / "cache" / "records"


def _studies(folder: Path) -> dict:
    """Every study of every journal in the tarballs, by name: [(tarball, study)]."""
    found = {}
    for tarball in sorted(HERE.glob("*/*.tar.gz")):
        unpacked = folder / tarball.stem
        with tarfile.open(tarball) as archive:
            archive.extractall(unpacked, filter="data")
        for journal in sorted(unpacked.glob("cache/studies/*.journal*")):
            if journal.suffix in (".flock", ".lock"):
                continue
            storage = JournalStorage(JournalFileBackend(str(journal)))
            for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
                study = optuna.load_study(study_name=summary.study_name, storage=storage)
                found.setdefault(summary.study_name, []).append((f"{tarball.name}:{journal.name}", study))
    return found


def main() -> None:
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        studies = _studies(Path(folder))
        for path in sorted(RECORDS.glob("*/*.json")):
            held = json.loads(path.read_text())
            budget = held["budget"]
            source, study = next((source, study) for source, study in studies[held["study"]["name"]]
                                 if len(study.get_trials(deepcopy=False)) == budget["trials"])
            measured = [trial for trial in study.get_trials(deepcopy=False)
                        if trial.state == optuna.trial.TrialState.COMPLETE and is_measured(trial)]
            assert len(measured) == budget["measured"], (path.name, len(measured), budget["measured"])
            seconds = round(sum(_measuring_seconds(trial) for trial in measured), 3)
            print(f"{path.name}: {budget['measuring_seconds']} -> {seconds} s ({len(measured)} measured trials of "
                  f"{source}, searched {held['searched']['started']} to {held['searched']['finished']})")
            if "--write" in sys.argv:
                budget["measuring_seconds"] = seconds
                path.write_text(json.dumps(held, indent=2) + "\n")


if __name__ == "__main__":
    main()
