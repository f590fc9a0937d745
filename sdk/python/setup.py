# The spanwatch Python SDK: pip install ./sdk/python (from the repository:
# the extension is built from include/spanwatch.h), or
# python3 setup.py build_ext --inplace.
import os

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))

setup(
    name="spanwatch",
    version="0.1.0",
    description="Spans for the spanwatch agent: a context manager and a decorator, at one load and a branch while nobody listens",
    packages=["spanwatch"],
    python_requires=">=3.9",
    ext_modules=[
        Extension(
            "spanwatch._spanwatch",
            sources=["src/_spanwatch.c", "src/frames.c"],
            include_dirs=[os.path.join(here, "..", "..", "include")],
            depends=[os.path.join(here, "..", "..", "include", "spanwatch.h")],
            # Frame pointers: the agent walks stacks by them, through this
            # extension's frames to the Python functions' trampolines.
            extra_compile_args=["-fno-omit-frame-pointer", "-std=gnu11"],
            # Never unloaded: the kernel writes the probe word in its data.
            extra_link_args=["-Wl,-z,nodelete", "-pthread"],
        )
    ],
)
