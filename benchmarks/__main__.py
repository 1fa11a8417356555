"""``python -m rdmaspawn.bench``: the same as ``rdmaspawn bench``."""

import sys

from .cli import main

sys.exit(main())
