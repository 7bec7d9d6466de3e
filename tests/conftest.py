"""Session-wide test settings."""
import atexit
import gc
import os
import shutil
import tempfile

import pytest

# native code (rvm/native) built by the tests goes to a cache of the test run, never to the
# user's ~/.cache; a cache this run made (owner-only, from mkdtemp) is removed when it ends.
# A directory the user chose with RVM_CACHE_DIR is used as it is and kept.
# A run that is killed (a timeout, SIGKILL) never reaches atexit, so each cache is named after
# its pytest process, and a run removes the caches of runs whose process is gone.
_PREFIX = "rvm-native-tests-"


def _remove_orphaned_caches() -> None:
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue                    # its run is still going
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue                    # another user's live process, or not a pid
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


if not os.environ.get("RVM_CACHE_DIR"):
    _remove_orphaned_caches()
    _cache = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    os.environ["RVM_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)


@pytest.fixture
def no_gc():
    """For the Ctrl-C tests: hypothesis installs a gc callback, and a SIGINT (interrupt_main)
    that arrives while it runs is printed as "Exception ignored" and lost; a run that would not
    end then never stops. With no collections during the test the interrupt reaches the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
