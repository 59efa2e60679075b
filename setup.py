"""Builds the compiled half of the Python package (paceline._paceline) with paceline's own CMake
project, for the interpreter running this build, and ships paceline's data folders (catalogs,
measured profiles, ready scenarios) inside the package as paceline/data, which the package
points PACELINE_DATA_DIR at when imported (python/paceline/__init__.py)."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
DATA = ["models/catalog", "hardware/catalog", "hardware/profiles", "scenarios"]


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        package_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
                        f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF",
                        "-DPACELINE_CALIBRATE=OFF", f"-DPACELINE_PYTHON_OUTPUT_DIR={package_dir}"], check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_paceline"], check=True)
        for folder in DATA:
            source = os.path.join(ROOT, folder)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(package_dir, "data", folder), dirs_exist_ok=True)


setup(
    packages=["paceline"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("paceline._paceline")],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/: that is the CMake build tree of the presets.
    options={"build": {"build_base": "build-python"}},
    zip_safe=False,
)
