"""Builds the samdecoding distribution (pyproject.toml holds its metadata).

The native module (samdecoding._native) is the project's CMake target
samdecoding_native. `pip install ./python` configures and builds it in a
build folder of its own (SAM_CMAKE_BUILD_DIR to choose it, SAM_CMAKE_ARGS for
more -D options), or copies a module already built when SAM_NATIVE_MODULE
names it (what the project's own test of the installed package does). The
version is the project's (the root CMakeLists.txt's project VERSION, or
SAM_VERSION where this folder is built outside the project).
"""
import glob
import importlib.machinery
import os
import re
import shlex
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    if os.environ.get("SAM_VERSION"):  # a copy of this folder, outside the project
        return os.environ["SAM_VERSION"]
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        match = re.search(r"project\(\s*sam_decoding\s+VERSION\s+([0-9.]+)", f.read())
    if not match:
        raise RuntimeError("samdecoding: no 'project(sam_decoding VERSION x.y.z)' in "
                           + os.path.join(ROOT, "CMakeLists.txt"))
    return match.group(1)


class BuildNative(build_ext):
    """Puts the CMake-built module where the wheel expects it."""

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        module = os.environ.get("SAM_NATIVE_MODULE") or self.cmake_build()
        suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES
                       if module.endswith(s)), None)
        if suffix is None or not target.endswith(suffix):
            raise RuntimeError("samdecoding: %s was not built for this interpreter (its name "
                               "should end with %s)" % (module, os.path.basename(target)[7:]))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(module, target)
        # samdecoding.Tokenizer loads SentencePiece from this module, beside the extension
        # (the CMake build puts it beside the module it builds).
        shim = os.path.join(os.path.dirname(module), "libsam_tokenizer_shim.so")
        if not os.path.exists(shim):
            raise RuntimeError("samdecoding: no %s beside %s (build the CMake target "
                               "samdecoding_native, which copies it there)" % (shim, module))
        shutil.copyfile(shim, os.path.join(os.path.dirname(target), os.path.basename(shim)))

    def cmake_build(self):
        build_dir = os.environ.get("SAM_CMAKE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DSAM_WITH_TORCH=OFF", "-DSAM_BUILD_TESTS=OFF", "-DSAM_BUILD_TOOLS=OFF",
                     "-DSAM_BUILD_BENCHMARKS=OFF", "-DSAM_BUILD_PYTHON=ON",
                     "-DPython_EXECUTABLE=" + os.path.realpath(os.sys.executable)]
        configure += shlex.split(os.environ.get("SAM_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "samdecoding_native"])
        folder = os.path.join(build_dir, "python", "samdecoding")
        built = [path for suffix in importlib.machinery.EXTENSION_SUFFIXES
                 for path in glob.glob(os.path.join(folder, "_native" + suffix))]
        if len(built) != 1:
            raise RuntimeError("samdecoding: the CMake build left %d native modules in %s" %
                               (len(built), folder))
        return built[0]


setup(version=project_version(),
      ext_modules=[Extension("samdecoding._native", sources=[])],
      cmdclass={"build_ext": BuildNative})
