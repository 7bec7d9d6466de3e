"""Session-wide test settings."""
import os
import tempfile

# native code (rvm/native) built by the tests goes to a cache of the test run, never to the
# user's ~/.cache
os.environ.setdefault("RVM_CACHE_DIR", tempfile.mkdtemp(prefix="rvm-native-tests-"))
