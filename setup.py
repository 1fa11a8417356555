# Metadata lives in pyproject.toml; this file hooks the cffi builder in and
# installs the start-up hook.
import os

from setuptools import setup
from setuptools.command.build_py import build_py

# The .pth hook that applies $RDMASPAWN at interpreter start must sit at the
# top of site-packages, outside the package, where no package-data setting
# reaches: build_py copies it there, into the wheel's root for `pip install .`
# and, for `pip install -e .` (PEP 660), into the editable wheel, whose root
# setuptools hands the install command as install_lib.
PTH = "src/rdmaspawn-autostart.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.copy_file(PTH, os.path.join(root, os.path.basename(PTH)))


setup(cffi_modules=["csrc/build_ffi.py:ffibuilder"], cmdclass={"build_py": build_py_with_pth})
