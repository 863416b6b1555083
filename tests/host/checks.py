# SPDX-License-Identifier: Apache-2.0
"""What the host test scripts share: the checkout's root, check(cond, what)
(prints each check, counts the failures) and finish(name) (prints the count,
exits 1 on any failure, else 0). A script in tests/host imports it by name:
Python puts the script's own folder first on sys.path."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
_failures = 0


def check(cond, what):
    global _failures
    print(("ok: " if cond else "FAIL: ") + what)
    _failures += 0 if cond else 1


def finish(name):
    print(f"{name}: {_failures} failed")
    sys.exit(1 if _failures else 0)
