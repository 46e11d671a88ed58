"""The cache is data: every loaded record is checked against the schema, and a corrupt, truncated,
foreign-version or hostile one is refused with its file named, never executed."""
import copy
import dataclasses
import json
import os
import re

import pytest
from records import H100, make_record

from tuner import cache
from tuner.config import Config
from tuner.problem import Problem
from tuner.space import SEED

GOOD = make_record(H100, Problem(64, 64, 64), [(Config(), 900.0), (SEED, 300.0)]).as_dict()


def _edited(edit):
    bad = copy.deepcopy(GOOD)
    edit(bad)
    return json.dumps(bad)


def _set(path: str, value):
    def edit(data):
        *parents, last = path.split(".")
        for part in parents:
            data = data[int(part)] if part.isdigit() else data[part]
        data[last] = value
    return _edited(edit)


def test_a_format_1_record_from_before_a_parameter_existed_loads_with_its_neutral_value(tmp_path):
    old = {**copy.deepcopy(GOOD), "format": 1}
    del old["family"]
    for entry in (old["best"], *old["runners_up"]):
        del entry["config"]["vector_fragments"], entry["config"]["min_blocks"], entry["config"]["double_buffer"]
    path = cache.record_path(tmp_path, H100.slug, Problem(64, 64, 64).key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    loaded = cache.read_record(path)
    assert loaded.configs == [Config(), SEED] and loaded.valid_configs() == [Config(), SEED]
    assert loaded.family == "matmul" and loaded.as_dict() == GOOD


def test_a_zero_tile_size_is_a_broken_rule_not_a_crash(tmp_path):
    path = cache.record_path(tmp_path, H100.slug, Problem(64, 64, 64).key)
    path.parent.mkdir(parents=True)
    path.write_text(_set("runners_up.0.config.thread_m", 0))
    assert cache.read_record(path).valid_configs() == [Config()]


def test_a_value_dropped_from_a_domain_loads_and_only_that_configuration_is_left_out(tmp_path):
    path = cache.record_path(tmp_path, H100.slug, Problem(64, 64, 64).key)
    path.parent.mkdir(parents=True)
    path.write_text(_set("runners_up.0.config.block_k", 4))
    loaded = cache.read_record(path)
    assert loaded.configs[1].block_k == 4 and loaded.valid_configs() == [Config()]


UNKNOWN_FORMAT = 'not a tuner record of a known format (its "format" is not one of 1, 2)'
def _claimed_rate(gflops: float):
    """The best's rate set to `gflops`, with the time and fraction of peak that go with it."""
    seconds, peak = Problem(64, 64, 64).flops / gflops / 1e9, H100.peak_gflops["float32"]
    return _edited(lambda data: data["best"]["measurement"].update(
        gflops=gflops, seconds=seconds, fraction_of_peak=gflops / peak))


HOSTILE = {
    "a rate that is not the product over the time": (
        _set("best.measurement.gflops", 9e9), "the best's measurement is not one the tuner made: its rate "
                                              "9,000,000,000 GFLOP/s is not the product's operations over its median"),
    "a rate over twice the peak": (_claimed_rate(140_000.0), "is over 2 times the device's nominal peak 66,908"),
    "a fraction of peak that is not the rate's": (
        _set("best.measurement.fraction_of_peak", 0.5), "its fraction of peak 0.5 is not its rate over"),
    "an error over the tolerance": (
        _set("runners_up.0.measurement.relative_error", 0.01), "runner-up 1's measurement is not one the tuner "
                                                                 "made: its relative error 0.01 is not within"),
    "truncated": (json.dumps(GOOD)[:300], "unreadable"),
    "binary garbage": ("\x00\xff\xfe" * 10, "unreadable"),
    "a list, not an object": ("[1, 2, 3]", "not a tuner record (its top level is not a JSON object)"),
    "true posing as format 1": (_set("format", True), UNKNOWN_FORMAT),
    "a newer format": (_set("format", 3), UNKNOWN_FORMAT),
    "another family": (_set("family", "conv2d"), "record.family must be one of matmul"),
    "code in a parameter": (_set("best.config.block_m", "__import__('os').system('touch pwned')"),
                            "record.best.config.block_m must be an integer from 0"),
    "a parameter out of range": (_set("best.config.block_m", 1 << 40), "record.best.config.block_m must be an integer"),
    "true posing as 1": (_set("best.config.thread_m", True), "record.best.config.thread_m must be an integer"),
    "1 posing as true": (_set("best.config.prefetch", 1), "record.best.config.prefetch must be one of"),
    "an unknown parameter": (_set("best.config.__class__", "os.system"),
                             "record.best.config has an unknown field '__class__'"),
    "kernel source smuggled in": (_set("source", "import os; os.system('touch pwned')"),
                                  "record has an unknown field 'source'"),
    "a negative dimension": (_set("problem.m", -64), "record.problem.m must be an integer from 1"),
    "an unknown dtype": (_set("problem.dtype", "object"), "record.problem.dtype must be one of"),
    "NaN GFLOP/s": (_set("best.measurement.gflops", float("nan")), "record.best.measurement.gflops must be a finite"),
    "infinite seconds": (_set("runners_up.0.measurement.seconds", float("inf")),
                         "record.runners_up[0].measurement.seconds must be a finite"),
    "a runner-up above the best": (
        _edited(lambda data: data.update(best=data["runners_up"][0], runners_up=[data["best"]])),
        "runner-up 1 is faster than the configuration ranked above it"),
    "a failed best": (_set("best.measurement.status", "wrong"), "record.best.measurement.status must be one of ok"),
    "too many runners-up": (_set("runners_up", [GOOD["best"]] * 50), "record.runners_up must be a list of at most 4"),
    "a huge string": (_set("device.name", "x" * 10_000), "record.device.name must be a string of at most"),
    "an escape sequence in a text": (_set("study.name", "test\x1b[2J"),
                                     "record.study.name holds a non-printing character (U+001B)"),
    "a forged line": (_set("study.storage", "test\nstudy: forged"), "record.study.storage holds a non-printing "
                                                                     "character (U+000A)"),
    "a bidi override": (_set("device.driver", "\u202e580.65"), "record.device.driver holds a non-printing character"),
    "a lone surrogate": (_set("device.name", "\ud800"), "record.device.name holds a non-printing character (U+D800)"),
    "a key that rings the bell": (_set("device.software", {"numba\x07": "0.68.1"}),
                                  "a key of record.device.software holds a non-printing character (U+0007)"),
    "a bad date": (_set("searched.finished", "yesterday"), "record.searched.finished must be an ISO 8601"),
    "an edited device": (_set("device.name", "NVIDIA B200"), "fingerprint does not match the device"),
    "float16 on roc": (_edited(lambda data: data.update(make_record(
        dataclasses.replace(H100, backend="roc"), Problem(8, 8, 8, "float16"), [(Config(), 1.0)]).as_dict())),
        "dtype float16 is not one of the roc backend's"),
    "deep nesting": ("[" * 100_000 + "]" * 100_000, "unreadable"),
    "over a megabyte": (json.dumps({**GOOD, "padding": " " * (2 << 20)}), "too large to be a record"),
}


def test_a_rate_up_to_twice_the_nominal_peak_is_believed(tmp_path):
    """The peak comes from a table of cores per multiprocessor, so a rate above it is believed up to
    record.PEAK_SLACK times it."""
    path = cache.record_path(tmp_path, H100.slug, Problem(64, 64, 64).key)
    path.parent.mkdir(parents=True)
    path.write_text(_claimed_rate(130_000.0))
    assert cache.read_record(path).best.measurement.gflops == 130_000.0


def test_a_roc_rate_over_twice_the_nominal_peak_is_believed(tmp_path):
    """HIP's nominal peak can be a quarter of an AMD GPU's real one (ROC.peak_bounds_rates)."""
    device = dataclasses.replace(H100, backend="roc", name="AMD Radeon RX 7900 XTX", arch="gfx1100",
                                 peak_gflops={"float32": 15_520.0})
    problem = Problem(64, 64, 64)
    path = cache.record_path(tmp_path, device.slug, problem.key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(make_record(device, problem, [(Config(), 36_840.0)]).as_dict()))
    assert cache.read_record(path).best.measurement.fraction_of_peak == 36_840.0 / 15_520.0


def test_a_record_made_by_the_tuner_passes_the_schema(tmp_path):
    path = cache.record_path(tmp_path, H100.slug, Problem(64, 64, 64).key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(GOOD))
    assert cache.read_record(path).as_dict() == GOOD
    assert cache.read_record(path).configs == [Config(), SEED]


@pytest.mark.parametrize("text, message", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_bad_record_is_refused_with_its_file_named(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(cache.CacheError, match=re.escape(message)) as error:
        cache.read_record(path)
    assert str(error.value).startswith(f"{path}: ")
    assert not (tmp_path / "pwned").exists()


def test_a_fifo_in_place_of_a_record_is_refused_without_blocking(tmp_path):
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    with pytest.raises(cache.CacheError, match="not a regular file"):
        cache.read_record(path)


@pytest.mark.parametrize("number, noun, plural, said", [
    (1, "trial", "", "1 trial"), (0, "trial", "", "0 trials"), (2, "trial", "", "2 trials"),
    (1, "search", "searches", "1 search"), (3, "search", "searches", "3 searches"),
    (1.0, "evaluation", "", "1 evaluation"), (1.5, "evaluation", "", "1.5 evaluations"),
    (4362, "configuration", "", "4,362 configurations"), (1e6, "run", "", "1,000,000 runs"),
])
def test_a_count_is_singular_for_one_only(number, noun, plural, said):
    from tuner.formats import counted

    assert counted(number, noun, plural) == said


@pytest.mark.parametrize("seconds, said", [(0.0015721, "1.572 ms"), (1.2e-5, "0.012 ms"), (0.3489, "348.9 ms"),
                                           (0.99996, "1,000 ms"), (2.302, "2,302 ms")])
def test_a_time_is_in_ms_to_four_significant_digits(seconds, said):
    from tuner.formats import duration

    assert duration(seconds) == said


@pytest.mark.parametrize("gflops, said", [(30912.4, "30,912 GFLOP/s"), (1.21e-5, "1.21e-05 GFLOP/s"),
                                          (1e308, "1e+308 GFLOP/s"), (float("inf"), "inf GFLOP/s")])
def test_a_rate_no_measurement_could_make_is_shown_in_three_digits(gflops, said):
    """A record edited by hand may claim 1e308 GFLOP/s: its message names it in a few characters."""
    from tuner.formats import rate

    assert rate(gflops) == said


def test_a_time_no_measurement_could_make_is_shown_in_four_digits():
    from tuner.formats import duration

    assert duration(1e300) == "1e+303 ms"


@pytest.mark.parametrize("text", ["run\u00a01", "/Users/me/Screenshot at 10.00.00\u202fAM/studies.journal",
                                  "\u7814\u7a76\u3000A", "caf\u00e9", "e\u0301",
                                  "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\U0001f469\u200d\U0001f4bb"])
def test_a_text_shown_as_itself_is_kept_whatever_its_spaces(text):
    """A no-break space (or macOS's narrow one, or an ideographic one) shows as a space and forges
    nothing, nor does a zero-width (non-)joiner, which Persian words and emoji need: a record keeps
    each, a search takes it as --study or --storage, and a label is left as it is."""
    from tuner.cli.arguments import _recorded_storage, _study_name
    from tuner.formats import printable
    from tuner.schema import Text

    assert Text()(text, "record.study.name") == "" and printable(text) == text
    assert _study_name(text) == text and _recorded_storage(text).endswith(text.rpartition("/")[2])
