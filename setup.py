"""`pip install --no-build-isolation .`: the Python module `looplm`, built by CMake (docs/python.md).

The module is the CMake target looplm_python (python/looplm_module.cpp; it links the library
statically, so it is one self-contained file). It is built in the CMake build directory the rest
of looplm uses, `build/` (or $LOOPLM_BUILD_DIR), so a tree that is already built installs in
seconds; when that directory was configured for another Python (another ABI), in
`build/pip-<tag>` instead. setuptools' own scratch files go to build/setuptools.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    text = open(os.path.join(ROOT, "include", "looplm", "types.h"), encoding="utf-8").read()
    m = re.search(r'kVersion = "(\d+\.\d+\.\d+)"', text)
    if not m:
        sys.exit("setup.py: no kVersion = \"X.Y.Z\" in include/looplm/types.h")
    return m.group(1)


def cached_python(build_dir):
    """The interpreter a configured CMake build directory builds the module for (None if unconfigured)."""
    try:
        cache = open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8").read()
    except OSError:
        return None
    # FindPython records the interpreter it used as _Python_EXECUTABLE (Python_EXECUTABLE when given).
    for key in ("Python_EXECUTABLE", "_Python_EXECUTABLE"):
        m = re.search(r"^" + key + r":[A-Z]*=(.*)$", cache, re.M)
        if m and m.group(1).strip():
            return m.group(1).strip()
    return ""


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        python = os.path.realpath(sys.executable)  # a venv's python is its base interpreter
        build_dir = os.path.abspath(os.environ.get("LOOPLM_BUILD_DIR") or os.path.join(ROOT, "build"))
        cached = cached_python(build_dir)
        if cached and os.path.realpath(cached) != python:
            tag = sysconfig.get_config_var("SOABI") or "python"
            print(f"looplm: {build_dir} builds for {cached}; building for {python} in build/pip-{tag}")
            build_dir = os.path.join(ROOT, "build", f"pip-{tag}")
            cached = cached_python(build_dir)
        if cached is None:
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DPython_EXECUTABLE={python}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "looplm_python", "-j", jobs])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build_dir, "python", "looplm" + suffix)
        if not os.path.exists(built):
            sys.exit(f"setup.py: CMake did not build {built} (pybind11-dev and python3-dev: scripts/install_deps.sh)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


os.makedirs(os.path.join(ROOT, "build", "setuptools"), exist_ok=True)
setup(
    version=version(),
    ext_modules=[Extension("looplm", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build", "setuptools")},
             "egg_info": {"egg_base": os.path.join("build", "setuptools")}},
    zip_safe=False,
)
