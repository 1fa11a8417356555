# Metadata lives in pyproject.toml; this file hooks the cffi builder in and
# installs the start-up hook.
import os
import re
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The .pth hook that applies $RDMASPAWN at interpreter start must sit at the
# top of site-packages, outside the package, where no package-data setting
# reaches: build_py copies it there, into the wheel's root for `pip install .`
# and, for `pip install -e .` (PEP 660), into the editable wheel, whose root
# setuptools hands the install command as install_lib.
PTH = "rdmaspawn-autostart.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.copy_file(PTH, os.path.join(root, os.path.basename(PTH)))


class build_ext_abi3_so(build_ext):
    """Name a limited-API module ``*.abi3.so`` whichever CPython builds it.

    setuptools takes the first suffix with ".abi3" that the building CPython
    lists; 3.15 lists ".abi3-x86_64-linux-gnu.so" first, a name that 3.9-3.14
    do not look for, so a cp39-abi3 wheel built by 3.15 would import nowhere
    else. Every CPython >= 3.2 on Linux imports ".abi3.so".
    """

    def get_ext_filename(self, fullname):
        return re.sub(r"\.abi3[^./]*\.so$", ".abi3.so", super().get_ext_filename(fullname))


# cffi builds the module for the limited API on CPython (not on free-threaded
# builds, which have none), so one abi3 wheel serves every CPython >= 3.9.
abi3 = {} if sysconfig.get_config_var("Py_GIL_DISABLED") else {"py_limited_api": "cp39"}

setup(cffi_modules=["csrc/build_ffi.py:ffibuilder"],
      cmdclass={"build_py": build_py_with_pth, "build_ext": build_ext_abi3_so},
      options={"bdist_wheel": abi3})
