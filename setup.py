# Metadata lives in pyproject.toml; this file only hooks the cffi builder in.
import sysconfig

from setuptools import setup

# cffi builds the module for the limited API on CPython (not on free-threaded
# builds, which have none), so one abi3 wheel serves every CPython >= 3.9.
abi3 = {} if sysconfig.get_config_var("Py_GIL_DISABLED") else {"py_limited_api": "cp39"}

setup(cffi_modules=["csrc/build_ffi.py:ffibuilder"], options={"bdist_wheel": abi3})
