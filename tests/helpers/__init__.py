"""What the tests share: running children and reading what they report.

``hazard``: a snippet in a fresh interpreter with the real DONTFORK hazard
planted (``run_with_hazard``), and the processes that hold mappings;
``child``: ``run_json``; ``report``: a child's last stdout line as JSON (imports no
rdmaspawn); ``libc``: the
ctypes ``mmap`` setup that child snippets share; ``probe``: the C probe and its
reports; ``process_state``: a process's children and open fds, imported by
tests and by their children alike.

pytest's default ("prepend") import mode puts ``tests/`` on ``sys.path``, so
tests import ``helpers.hazard`` and friends; a child that needs one puts
``tests/`` on its path (:data:`TESTS`; ``helpers.child.python_argv`` does).
"""
from __future__ import annotations

import os

#: The tests' directory: on a child's sys.path, it can import ``helpers``.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
