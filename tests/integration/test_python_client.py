"""The Python client's tests (clients/python/tests/test_client.py), collected
here so that scripts/test.sh runs and counts them in each pass."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "tests"))
from test_client import *  # noqa: E402,F401,F403
