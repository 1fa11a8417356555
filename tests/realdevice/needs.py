"""Skip a device test module outside the lane, fail it inside.

The rxe lane sets RDMASPAWN_REQUIRE_RXE=1 and a variable per stack it provides
(RDMASPAWN_REQUIRE_TORCH, RDMASPAWN_REQUIRE_UCX): where all of a module's are
set, what it needs and lacks is a failure, not a skip.
"""

from __future__ import annotations

import os

import pytest


def require(ok: bool, why: str, *variables: str) -> None:
    """Go on if ``ok``; else fail where every one of ``variables`` is "1", else skip the module."""
    if ok:
        return
    if variables and all(os.environ.get(v) == "1" for v in variables):
        pytest.fail(f"{'=1 and '.join(variables)}=1 but {why}", pytrace=False)
    pytest.skip(f"{why}: runs in the soft-RoCE VM (.ci/lanes/rxe.sh)", allow_module_level=True)
