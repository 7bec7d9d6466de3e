"""The native cache's trust model (issue 19): rvm loads a cached library only from a private
directory and file of this user, rebuilds a corrupt one, and makes its directory owner-only."""
from __future__ import annotations

import importlib
import os
import platform

import pytest

native_build = importlib.import_module("rvm.native.build")

pytestmark = pytest.mark.skipif(native_build.compiler() is None, reason="no C compiler")

SOURCE = "int rvm_test_answer(void) { return 42; }\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("RVM_CACHE_DIR", str(d))
    return d


def test_the_cache_directory_is_made_owner_only_whatever_the_umask(cache):
    old = os.umask(0)
    try:
        lib, path, fresh = native_build.build(SOURCE)
    finally:
        os.umask(old)
    assert fresh and lib.rvm_test_answer() == 42
    assert os.stat(cache).st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o077 == 0
    assert native_build.build(SOURCE)[2] is False           # found in the cache


def test_a_cache_others_can_write_is_refused_and_says_why(cache):
    native_build.build(SOURCE)
    os.chmod(cache, 0o777)
    with pytest.raises(native_build.UnsafeCache, match=r"writable by group and others \(mode 777\)"):
        native_build.build(SOURCE)
    os.chmod(cache, 0o700)
    path = native_build.build(SOURCE)[1]
    os.chmod(path, 0o766)
    with pytest.raises(native_build.UnsafeCache, match="library .* writable by"):
        native_build.build(SOURCE)


def test_a_planted_symlink_is_refused(cache, tmp_path):
    path = native_build.build(SOURCE)[1]
    elsewhere = tmp_path / "planted.so"
    os.replace(path, elsewhere)
    os.symlink(elsewhere, path)
    with pytest.raises(native_build.UnsafeCache, match="symbolic link"):
        native_build.build(SOURCE)


def test_a_corrupt_cached_library_is_rebuilt(cache):
    source = SOURCE + "int rvm_test_corrupt;\n"      # a library this process never loaded
    cache.mkdir(mode=0o700)
    path = cache / f"rvm_{native_build._key(source, native_build.compiler())}.so"
    path.write_bytes(b"not an ELF file")
    os.chmod(path, 0o600)
    lib, again, fresh = native_build.build(source)
    assert again == path and fresh and lib.rvm_test_answer() == 42


def test_an_unsafe_cache_leaves_grad_fn_interpreted_and_says_why(cache):
    import rvm

    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o757)
    prog = rvm.assemble("inout x: float = 2.0\noutput y: float\nfunc main() {\n"
                        "    y += x * x\n}\n")
    f = rvm.grad_fn(prog, of="y", wrt="x")
    with pytest.raises(native_build.UnsafeCache):
        f.compile()
    assert f({"x": 3.0}) == {"x": 6.0}


def test_translation_units_build_at_once_into_one_library(cache):
    """build() of several sources compiles each (at once) and links them into one library;
    a unit's error is reported with the compiler's message."""
    parts = [SOURCE, "int rvm_test_other(void) { return 7; }\n"]
    lib, path, fresh = native_build.build(parts)
    assert fresh and lib.rvm_test_answer() == 42 and lib.rvm_test_other() == 7
    assert native_build.build(parts)[1:] == (path, False)
    with pytest.raises(native_build.BuildError, match="rvm_test_missing_type"):
        native_build.build([SOURCE, "rvm_test_missing_type x;\n"])


def test_a_library_built_for_the_cpu_has_its_own_key(cache):
    """for_cpu adds cflags.ARCH and the compiler's expansion of it to the cache key: a cache
    shared by machines with other CPUs never hands one a library it cannot run."""
    flags, arch = native_build.arch_flags(native_build.compiler())
    if not flags:
        pytest.skip("the compiler does not take -march=native")
    assert "march=" in arch or "mcpu=" in arch
    portable = native_build.build(SOURCE)
    mine = native_build.build(SOURCE, for_cpu=True)
    assert mine[1] != portable[1] and mine[0].rvm_test_answer() == 42
    assert native_build._key(SOURCE, "cc", [], arch) != native_build._key(SOURCE, "cc", [], "x")


def test_for_cpu_can_be_given_per_translation_unit(cache):
    """for_cpu per part: only the parts marked get cflags.ARCH (the tangent library builds its
    lanes for the CPU and its scalar modes portable); each choice has its own library, and the
    flags must match the parts."""
    flags, _arch = native_build.arch_flags(native_build.compiler())
    if not flags:
        pytest.skip("the compiler does not take -march=native")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the probe is x86's")
    # __SSE4_2__: off in the portable x86-64 build, on for any CPU of the last decade
    probe = ("int rvm_test_vex_%s(void) {\n#ifdef __SSE4_2__\nreturn 1;\n#else\nreturn 0;\n"
             "#endif\n}\n")
    parts = [probe % "a", probe % "b"]
    mixed = native_build.build(parts, for_cpu=(False, True))
    assert mixed[0].rvm_test_vex_a() == 0 and mixed[0].rvm_test_vex_b() == 1
    every = native_build.build(parts, for_cpu=True)
    assert every[0].rvm_test_vex_a() == 1 and every[1] != mixed[1]
    assert native_build.build(parts)[1] not in (mixed[1], every[1])
    with pytest.raises(ValueError, match="one flag per part"):
        native_build.build(parts, for_cpu=(True,))


def test_rvm_native_arch_0_builds_for_any_cpu(cache, monkeypatch):
    """RVM_NATIVE_ARCH=0: for_cpu parts are built portable, under the portable key."""
    monkeypatch.setenv("RVM_NATIVE_ARCH", "0")
    native_build.arch_flags.cache_clear()
    try:
        assert native_build.arch_flags(native_build.compiler()) == ([], "")
        assert native_build.build(SOURCE, for_cpu=True)[1] == native_build.build(SOURCE)[1]
    finally:
        native_build.arch_flags.cache_clear()
