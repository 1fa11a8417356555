"""The lane's record of what a control measured: the test's output and, under
RDMASPAWN_RXE_OUT (set by .ci/lanes/rxe.sh), one JSON file per name."""

from __future__ import annotations

import json
import os
import sys


def record(name: str, data: dict) -> None:
    print(json.dumps({name: data}))
    out = os.environ.get("RDMASPAWN_RXE_OUT")
    if out:
        tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
        with open(os.path.join(out, f"{tag}-{name}.json"), "w") as f:
            json.dump(data, f, indent=1)
