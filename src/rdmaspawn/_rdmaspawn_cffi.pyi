# The cffi-generated extension (csrc/build_ffi.py): C names, loosely typed.
from typing import Any

ffi: Any
lib: Any
