"""Session-wide test settings."""
import atexit
import os
import shutil
import tempfile

# native code (rvm/native) built by the tests goes to a cache of the test run, never to the
# user's ~/.cache; a cache this run made (owner-only, from mkdtemp) is removed when it ends.
# A directory the user chose with RVM_CACHE_DIR is used as it is and kept.
if not os.environ.get("RVM_CACHE_DIR"):
    _cache = tempfile.mkdtemp(prefix="rvm-native-tests-")
    os.environ["RVM_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
