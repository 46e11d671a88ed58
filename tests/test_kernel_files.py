"""Kernel files are where Numba's disk cache finds the kernels, never a source of code: a file that
differs from the source rendered now (appended to, planted, edited, a symbolic link, another
user's) is replaced before use and does not run, and the directory must be this user's alone."""
import errno
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from processes import run_at_once

import tuner
from tuner import kernel, simulator
from tuner.backends import CUDA
from tuner.kernel import KernelFileWarning, UnsafeKernelDirectory, kernel_dir, write_source
from tuner.runtime import open_runtime
from tuner.source import render
from tuner.space import Space

PLANTED = "\nimport pathlib\npathlib.Path({marker!r}).write_text('planted code ran')\n"


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A fresh kernel directory and cache, nothing tuned, the default kernel not yet imported."""
    directory = tmp_path / "kernels"
    monkeypatch.setenv("TUNER_KERNEL_DIR", str(directory))
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel, "_replaced", set())
    source = render(Space.of(CUDA, "float32"), Space.of(CUDA, "float32").default())
    path = directory / f"matmul_{__import__('hashlib').sha256(source.encode()).hexdigest()[:20]}.py"
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    tuner.reload()
    warnings.simplefilter("ignore", tuner.UntunedWarning)
    yield directory, path, source
    sys.modules.pop(path.stem, None)
    tuner.reload()


def _product_is_right():
    rng = np.random.default_rng(1)
    A, B = rng.uniform(-1, 1, (9, 7)).astype(np.float32), rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    assert np.allclose(tuner.matmul(A, B, alpha=0.5), 0.5 * (A @ B), atol=1e-5)


def _plant(path, text):
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("tamper", ["appended", "planted", "edited"])
def test_a_kernel_file_that_differs_from_its_source_never_runs(kernels, tmp_path, tamper):
    directory, path, source = kernels
    marker = tmp_path / "marker"
    planted = PLANTED.format(marker=str(marker))
    _plant(path, {"appended": source + planted, "planted": planted,
                  "edited": source.replace("alpha * ", "2 * alpha * ") + planted}[tamper])
    with pytest.warns(KernelFileWarning, match=f"{path.name} was not the source rendered now; it was not run"):
        _product_is_right()
    assert not marker.exists()
    assert path.read_text() == source


def test_a_symbolic_link_at_a_kernel_name_is_replaced_not_followed(kernels, tmp_path):
    directory, path, source = kernels
    marker, target = tmp_path / "marker", tmp_path / "elsewhere.py"
    target.write_text(source + PLANTED.format(marker=str(marker)))
    directory.mkdir(mode=0o700)
    path.symlink_to(target)
    with pytest.warns(KernelFileWarning, match="was a symbolic link"):
        _product_is_right()
    assert not marker.exists() and not path.is_symlink() and path.read_text() == source
    assert "planted code ran" not in source and PLANTED[:20] in target.read_text()  # the target is untouched


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_kernel_file_of_another_user_is_replaced(kernels):
    directory, path, source = kernels
    _plant(path, source)
    os.chown(path, 12345, -1)
    with pytest.warns(KernelFileWarning, match="owned by user 12345"):
        _product_is_right()
    assert path.stat().st_uid == os.geteuid()


@pytest.mark.parametrize("call", ["matmul", "get_kernel"])
def test_a_replaced_kernel_file_is_warned_of_at_the_users_own_line(kernels, call):
    """However deep in tuner the file is checked, the warning names the line of the program that
    called tuner, not a line of tuner's."""
    directory, path, source = kernels
    _plant(path, source + "\n# edited\n")
    ones = np.ones((2, 2), np.float32)
    with pytest.warns(KernelFileWarning) as caught:
        line = sys._getframe().f_lineno + 1
        tuner.matmul(ones, ones) if call == "matmul" else tuner.get_kernel(2, 2, 2)
    assert [(warning.filename, warning.lineno) for warning in caught if warning.category is KernelFileWarning] == [
        (__file__, line)]


def test_the_replacement_is_said_once_and_takes_numbas_cache_of_the_file_with_it(kernels, tmp_path):
    directory, path, source = kernels
    _plant(path, source + "\n# edited\n")
    stale = directory / "__pycache__" / f"{path.stem}.matmul-12.py311.nbi"
    stale.parent.mkdir(mode=0o700)
    stale.write_bytes(b"a planted pickle")
    with pytest.warns(KernelFileWarning) as caught:
        write_source(source, directory)
        path.write_text(source + "\n# edited again\n")
        write_source(source, directory)
    assert len(caught) == 1 and not stale.exists() and path.read_text() == source


@pytest.mark.parametrize("unsafe", ["writable by others", "a symbolic link", "another user's"])
def test_an_unsafe_kernel_directory_is_refused_in_one_line(kernels, tmp_path, monkeypatch, unsafe):
    directory, path, source = kernels
    if unsafe == "writable by others":
        directory.mkdir()
        directory.chmod(0o777)
        match = "can be written by other users .mode 777."
    elif unsafe == "a symbolic link":
        (tmp_path / "real").mkdir(mode=0o700)
        directory.symlink_to(tmp_path / "real")
        match = "is a symbolic link"
    else:
        directory.mkdir(mode=0o700)
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
        match = "belongs to user"
    with pytest.raises(UnsafeKernelDirectory, match=f"{match}.*set TUNER_KERNEL_DIR to a directory of your own") as e:
        tuner.get_kernel(8, 8, 8)
    assert "\n" not in str(e.value)
    assert not path.exists()


def test_numbas_cache_directory_must_be_private_too(kernels):
    directory, path, source = kernels
    (directory / "__pycache__").mkdir(parents=True)
    (directory / "__pycache__").chmod(0o777)
    with pytest.raises(UnsafeKernelDirectory, match="__pycache__ can be written by other users"):
        write_source(source, directory)


def test_new_directories_are_private(kernels):
    directory, path, source = kernels
    write_source(source, directory)
    assert directory.stat().st_mode & 0o777 == 0o700
    assert (directory / "__pycache__").stat().st_mode & 0o777 == 0o700


def test_under_a_permissive_umask_the_folders_tuner_makes_are_private(kernels, tmp_path, monkeypatch):
    """Under umask 002 (many Linux users' default) a cache folder made with the umask's 775 would
    make the kernel directory below it unsafe, on this run and every later one."""
    monkeypatch.delenv("TUNER_KERNEL_DIR")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "new" / "cache"))
    previous = os.umask(0o002)
    try:
        _product_is_right()
    finally:
        os.umask(previous)
    for folder in (tmp_path / "new", tmp_path / "new" / "cache", tmp_path / "new" / "cache" / "kernels"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


@pytest.mark.parametrize("chosen_by, elsewhere", [
    ("TUNER_KERNEL_DIR", "set TUNER_KERNEL_DIR to another directory"),
    ("the cache directory", "give another cache directory (--cache-dir, TUNER_CACHE_DIR, tuner.get_kernel's "
                            "cache_dir=), whose kernels/ holds them, or set TUNER_KERNEL_DIR to another directory")])
def test_a_full_disk_names_the_file_and_what_chose_its_folder_and_leaves_no_temporary_file(
        kernels, monkeypatch, tmp_path, chosen_by, elsewhere):
    """Where TUNER_KERNEL_DIR is unset, the folder is the cache directory's kernels/: that is what to change."""
    directory, path, source = kernels
    if chosen_by == "the cache directory":
        monkeypatch.delenv("TUNER_KERNEL_DIR")
        directory = kernel.kernel_dir()
        path = directory / path.name
        assert directory == tmp_path / "cache" / "kernels"

    def full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UnsafeKernelDirectory) as refused:
        write_source(source)
    assert str(refused.value) == (f"cannot write the kernel file {path} (No space left on device); check the disk "
                                  f"space and what is at that path, or {elsewhere}")
    assert not path.exists() and not list(directory.glob("*.tmp"))


def test_the_temporary_file_of_a_writer_killed_before_its_rename_is_removed(kernels):
    """A writer holds the file's lock from creating its temporary file to renaming it, so the next
    writer, holding the lock, removes only what a killed one left: never another file's."""
    directory, path, source = kernels
    directory.mkdir(mode=0o700)
    left = directory / f"{path.name}.k1ll3d.tmp"
    left.write_text(source[:100])
    others = [directory / "matmul_0123456789abcdef0123.py.x1y2z3.tmp", directory / "notes.tmp"]
    for other in others:
        other.write_text("")
    assert write_source(source, directory) == path and path.read_text() == source
    assert not left.exists() and all(other.exists() for other in others)


def _write_often(path, source: str, start) -> None:
    start.wait()
    for _ in range(100):
        kernel._write_atomically(path, source.encode())


def test_a_kernel_directory_the_cache_directory_chose_names_the_settings_that_choose_another(kernels, monkeypatch):
    """Where TUNER_KERNEL_DIR is unset, what to change is the cache directory, which tuner.get_kernel's
    cache_dir= gives too (tuner.matmul takes none)."""
    source = kernels[2]
    monkeypatch.delenv("TUNER_KERNEL_DIR")
    directory = kernel.kernel_dir()
    directory.parent.mkdir(parents=True, exist_ok=True)
    directory.write_text("")
    with pytest.raises(UnsafeKernelDirectory) as refused:
        write_source(source)
    assert str(refused.value) == (f"{directory} exists and is not a directory; set TUNER_CACHE_DIR (or --cache-dir, "
                                  "tuner.get_kernel's cache_dir=) to a directory of your own, whose kernels/ tuner "
                                  "creates with mode 700, or set TUNER_KERNEL_DIR to one")


def test_writers_of_one_kernel_file_at_once_never_remove_each_others_temporary_file(kernels):
    """Each writer removes temporary files only under the file's lock, which the others hold until
    their rename, so none loses its own (os.replace would fail) and none is left."""
    directory, path, source = kernels
    directory.mkdir(mode=0o700)
    run_at_once(_write_often, [(path, source)] * 4)
    assert path.read_text() == source and not list(directory.glob("*.tmp"))


def test_an_unwritable_kernel_directory_is_one_clear_error_from_python(kernels, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TUNER_KERNEL_DIR", str(blocker / "kernels"))
    with pytest.raises(UnsafeKernelDirectory, match=f"cannot create the kernel directory {blocker / 'kernels'}"):
        tuner.get_kernel(8, 8, 8)


def test_a_kernel_directory_in_a_cache_directory_that_cannot_be_made_names_the_cache_directory(
        kernels, monkeypatch, tmp_path):
    """Without TUNER_KERNEL_DIR the kernel directory is the cache directory's kernels/: the fix is another cache."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("TUNER_KERNEL_DIR")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(UnsafeKernelDirectory, match=f"cannot create the kernel directory {blocker / 'cache'}.*; set "
                       "TUNER_CACHE_DIR .* to a directory of your own") as error:
        tuner.get_kernel(8, 8, 8)
    assert "\n" not in str(error.value)


def test_the_kernel_directory_follows_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("TUNER_KERNEL_DIR")
    assert kernel_dir(tmp_path / "given") == tmp_path / "given" / "kernels"
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "env"))
    assert kernel_dir() == tmp_path / "env" / "kernels"
    monkeypatch.setenv("TUNER_KERNEL_DIR", str(tmp_path / "mine"))
    assert kernel_dir(tmp_path / "given") == tmp_path / "mine"


def test_a_search_with_a_cache_directory_keeps_its_kernels_there(monkeypatch, tmp_path):
    from tuner.cli import main

    monkeypatch.delenv("TUNER_KERNEL_DIR")
    assert main(["search", "--backend", "cuda", "--simulate", "--shape", "8", "8", "8", "--trials", "1",
                 "--cache-dir", str(tmp_path)]) == 0
    assert list((tmp_path / "kernels").glob("matmul_*.py"))


def test_a_numba_cache_directory_others_can_write_is_refused(kernels, monkeypatch, tmp_path):
    directory, path, source = kernels
    shared = tmp_path / "numba-cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    with pytest.raises(UnsafeKernelDirectory,
                       match="Numba.s cache directory .* can be written by other users.*unset NUMBA_CACHE_DIR"):
        write_source(source, directory)


def test_a_numba_cache_directory_set_in_a_numba_config_file_is_checked_too(kernels, monkeypatch, tmp_path):
    directory, path, source = kernels
    shared = tmp_path / "numba-cache"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / ".numba_config.yaml").write_text(f"cache_dir: {shared}\n")  # Numba reads it from the current directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeKernelDirectory, match=f"Numba.s cache directory {shared} can be written by other "
                                                    "users.*numba_config.yaml"):
        write_source(source, directory)


@pytest.mark.parametrize("line", ["cuda_memory_manager: planted", "cuda_driver: ./libcuda.so",
                                  "CUDA_INCLUDE_PATH: ./include", "cache_locator_classes: planted.Locator",
                                  "cuda_dr\u0131ver: ./libcuda.so", "cache_locator_cla\u017f\u017fes: planted.Locator"],
                         ids=["memory manager", "driver", "include path", "cache locator", "a dotless i",
                              "a long s"])  # Numba reads NUMBA_ + the name in upper case: ı is I, ſ is S
def test_a_numba_config_file_that_names_code_to_load_is_refused(kernels, monkeypatch, tmp_path, line):
    directory, path, source = kernels
    (tmp_path / "planted.py").write_text(PLANTED.format(marker=str(tmp_path / "marker")))  # what Numba would import
    (tmp_path / ".numba_config.yaml").write_text(f"num_threads: 2\n{line}\n")
    monkeypatch.chdir(tmp_path)
    option = line.split(":")[0]
    with pytest.raises(UnsafeKernelDirectory, match=f"{tmp_path / '.numba_config.yaml'} sets {option} .*remove it "
                                                    f"there, or set NUMBA_{option.upper()} in the environment") as e:
        write_source(source, directory)
    assert "\n" not in str(e.value) and not path.exists()


@pytest.mark.parametrize("text", ["num_threads: [2\n", "- cuda_driver\n", "\xff\xfe", "on: 1\n"])
def test_a_numba_config_file_numba_cannot_read_is_refused_in_one_line(kernels, monkeypatch, tmp_path, text):
    """Numba would fail on it with a traceback at its next compile."""
    directory, path, source = kernels
    (tmp_path / ".numba_config.yaml").write_text(text, encoding="latin-1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeKernelDirectory, match="which Numba reads, is not a YAML mapping of option names .*fix "
                                                    "it or remove it") as error:
        write_source(source, directory)
    assert "\n" not in str(error.value) and not path.exists()


def test_an_innocuous_numba_config_file_is_left_alone(kernels, monkeypatch, tmp_path):
    (tmp_path / ".numba_config.yaml").write_text(f"num_threads: 2\ndebuginfo: 0\ncache_dir: {tmp_path / 'numba'}\n")
    monkeypatch.chdir(tmp_path)
    _product_is_right()
    assert (tmp_path / "numba").is_dir()  # the file was read: the cache directory it sets was made, private


@pytest.mark.parametrize("unsafe", ["writable by others", "a symbolic link", pytest.param(
    "another user's", marks=pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root"))])
def test_a_numba_config_file_that_another_user_could_have_written_is_refused(kernels, monkeypatch, tmp_path, unsafe):
    directory, path, source = kernels
    config = tmp_path / ".numba_config.yaml"
    if unsafe == "a symbolic link":
        (tmp_path / "elsewhere.yaml").write_text("num_threads: 2\n")
        config.symlink_to(tmp_path / "elsewhere.yaml")
        match = "is a symbolic link"
    elif unsafe == "writable by others":
        config.write_text("num_threads: 2\n")
        config.chmod(0o666)
        match = "can be written by other users .mode 666."
    else:
        config.write_text("num_threads: 2\n")
        os.chown(config, 12345, -1)
        match = "belongs to user 12345"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeKernelDirectory, match=f"{config}, which Numba reads, {match}; make it a file of yours"):
        write_source(source, directory)
    assert not path.exists()


def test_a_current_directory_where_others_could_put_a_numba_config_file_is_refused(kernels, monkeypatch, tmp_path):
    directory, path, source = kernels
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: anyone may create the file Numba reads there
    monkeypatch.chdir(shared)
    with pytest.raises(UnsafeKernelDirectory, match=f"the current directory {shared} can be written by other users "
                                                    ".mode 1777., so someone else could put there the "
                                                    ".numba_config.yaml that Numba reads; run tuner from a directory "
                                                    "of your own"):
        write_source(source, directory)
    (shared / ".numba_config.yaml").write_text("num_threads: 2\n")  # a file of one's own, which no one else may
    assert write_source(source, directory).read_text() == source  # replace in a sticky folder
    shared.chmod(0o777)  # not sticky: anyone may replace it
    with pytest.raises(UnsafeKernelDirectory, match=f"can be written by other users .mode 777.*; run `chmod go-w "
                                                    f"{shared}`"):
        write_source(source, directory)


@pytest.mark.parametrize("numba", ["numba-cuda", "built-in"])
@pytest.mark.parametrize("where", ["environment", "file"])
def test_a_numba_configuration_that_forces_a_compute_capability_is_refused(kernels, monkeypatch, tmp_path, where,
                                                                           numba):
    """numba.cuda would compile for it in place of the GPU's and cache the kernels under the GPU's
    compute capability, where later runs without it would load them; the simulator compiles for none.
    Numba's built-in numba.cuda (no numba.cuda.core) reads it from Numba's own configuration;
    numba-hip, which shares that configuration, never reads it."""
    directory, path, source = kernels
    if numba == "built-in":
        for name in ("numba.cuda.core", "numba.cuda.core.config"):
            monkeypatch.setitem(sys.modules, name, None)  # an import of it fails
    if where == "file":
        (tmp_path / ".numba_config.yaml").write_text("force_cuda_cc: '8.0'\n")
    else:
        monkeypatch.setenv("NUMBA_FORCE_CUDA_CC", "8.0")
    monkeypatch.chdir(tmp_path)
    assert write_source(source, directory).read_text() == source
    path.unlink()
    monkeypatch.setattr(simulator, "simulating", lambda: False)  # as on a GPU host
    with pytest.raises(UnsafeKernelDirectory, match=f"^Numba's configuration sets FORCE_CUDA_CC .NUMBA_FORCE_CUDA_CC, "
                                                    f"or force_cuda_cc in {tmp_path / '.numba_config.yaml'}.*; "
                                                    "unset it$"):
        write_source(source, directory)
    assert not path.exists()
    assert write_source(source, directory, module="hip").read_text() == source
    path.unlink()
    monkeypatch.delenv("NUMBA_FORCE_CUDA_CC", raising=False)
    (tmp_path / ".numba_config.yaml").unlink(missing_ok=True)
    assert write_source(source, directory).read_text() == source  # unset: Numba's configuration is read again


def test_a_gpu_runtime_is_not_opened_where_the_numba_config_file_names_code_to_load(monkeypatch, tmp_path):
    (tmp_path / ".numba_config.yaml").write_text("cuda_driver: ./libcuda.so\n")  # dlopened at the driver's first use
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")  # as on a GPU host
    monkeypatch.setattr(type(CUDA), "detect", lambda self: 1)
    monkeypatch.setattr(type(CUDA), "load", lambda self: pytest.fail("Numba's GPU module was loaded"))
    with pytest.raises(UnsafeKernelDirectory, match="sets cuda_driver .a driver library to load."):
        open_runtime(CUDA)


def test_a_kernel_directory_inside_a_folder_others_can_write_is_refused(kernels, tmp_path, monkeypatch):
    directory, path, source = kernels
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may rename what is inside
    with pytest.raises(UnsafeKernelDirectory, match=f"lies in {shared}, which other users can write .mode 777."):
        write_source(source, shared / "kernels")
    shared.chmod(0o1777)  # sticky, as /tmp is: only the owner may rename or remove
    assert write_source(source, shared / "kernels").read_text() == source


@pytest.mark.parametrize("others", [None, "a member named by the group", "a user whose primary group it is",
                                    "a group not named as the user", "a group not the user's primary one"])
def test_a_folder_writable_by_ones_private_group_only_is_safe(kernels, tmp_path, monkeypatch, others):
    """A umask of 002 (the default of Debian and Ubuntu for a user with a group of their own) makes
    every folder 775: writable by the group, which is that user's alone. Any other user in it, or
    a group that is not the user's private one, makes the folder unsafe."""
    import grp
    import pwd

    directory, path, source = kernels
    folder = tmp_path / "umask-002"
    folder.mkdir()
    folder.chmod(0o775)
    gid = folder.stat().st_gid
    me = pwd.struct_passwd(("me", "x", os.geteuid(), gid + (others == "a group not the user's primary one"), "",
                            "/home/me", "/bin/sh"))
    users = [me] + ([pwd.struct_passwd(("other", "x", 12345, gid, "", "/", "/bin/sh"))]
                    if others == "a user whose primary group it is" else [])
    group = grp.struct_group(("staff" if others == "a group not named as the user" else "me", "x", gid,
                              ["other"] if others == "a member named by the group" else []))
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: me)
    monkeypatch.setattr(pwd, "getpwall", lambda: users)
    monkeypatch.setattr(grp, "getgrgid", lambda number: group)
    if others is None:
        assert write_source(source, folder / "kernels").read_text() == source
    else:
        with pytest.raises(UnsafeKernelDirectory, match=f"lies in {folder}, which other users can write .mode 775."):
            write_source(source, folder / "kernels")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a symbolic link to another user needs root")
def test_a_kernel_directory_reached_through_another_users_symbolic_link_is_refused(kernels, tmp_path):
    directory, path, source = kernels
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: whoever owns a link there may point it elsewhere at any moment
    (tmp_path / "mine").mkdir(mode=0o700)
    link = sticky / "link"
    link.symlink_to(tmp_path / "mine")
    assert write_source(source, link / "kernels").read_text() == source  # a link of one's own is safe there
    os.chown(link, 12345, -1, follow_symlinks=False)
    with pytest.raises(UnsafeKernelDirectory, match=f"reached through the symbolic link {link}, which belongs to "
                                                    "user 12345"):
        write_source(source, link / "kernels")


def test_a_kernel_directory_reached_through_a_link_in_a_folder_others_can_write_is_refused(kernels, tmp_path):
    directory, path, source = kernels
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may replace the link, though its target's folders are private
    (tmp_path / "mine").mkdir(mode=0o700)
    (shared / "link").symlink_to("../mine")
    with pytest.raises(UnsafeKernelDirectory, match=f"lies in {shared}, which other users can write .mode 777."):
        write_source(source, shared / "link" / "kernels")
    assert write_source(source, tmp_path / "mine" / "kernels").read_text() == source


_LOAD_UNDER_TWO_SETTINGS = """
import os, sys
from pathlib import Path
from tuner import kernel
from tuner.backends import CUDA
from tuner.space import Space
space = Space.of(CUDA, "float32")
first = kernel.load(space, space.default(), Path(sys.argv[1]))
os.environ[sys.argv[2]] = sys.argv[3]
second = kernel.load(space, space.default(), Path(sys.argv[1]))
print(first.path != second.path, *(bool(k.function.targetoptions[sys.argv[4]]) for k in (first, second)))
"""


@pytest.mark.parametrize("variable, value, option", [("NUMBA_OPT", "0", "opt"), ("NUMBA_CUDA_DEBUGINFO", "1", "debug")])
def test_a_kernel_compiled_under_another_setting_has_a_file_and_so_a_numba_cache_of_its_own(tmp_path, variable,
                                                                                             value, option):
    """Numba's cache of a file's kernels is keyed by neither setting (numba-cuda's Cache._index_key),
    so one file would serve the kernels compiled under either; numba-cuda compiles without a GPU."""
    env = {name: text for name, text in os.environ.items()
           if name not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_OPT", "NUMBA_CUDA_DEBUGINFO")}
    done = subprocess.run([sys.executable, "-c", _LOAD_UNDER_TWO_SETTINGS, str(tmp_path / "kernels"), variable, value,
                           option], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    default = option == "opt"
    assert done.stdout.split() == ["True", str(default), str(not default)]


_LOAD_THEN_COUNT = """
import sys
from pathlib import Path
from tuner import kernel, resources
from tuner.backends import CUDA
from tuner.space import Space
space = Space.of(CUDA, "float32")
kernel.load(space, space.default(), Path(sys.argv[1]))
resources._kernel_function(space, space.default(), Path(sys.argv[1]))
print(*sorted(path.name for path in Path(sys.argv[1]).glob("matmul_*.py")))
"""


def test_a_resource_count_uses_the_file_of_the_kernel_that_load_wrote(tmp_path):
    """The count named its file for the source alone: a second file of the same kernel, beside load's."""
    env = {name: text for name, text in os.environ.items() if name != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _LOAD_THEN_COUNT, str(tmp_path / "kernels")], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 1, done.stdout
