# Metadata lives in pyproject.toml; this file only hooks the cffi builder in.
from setuptools import setup

setup(cffi_modules=["csrc/build_ffi.py:ffibuilder"])
