"""Build of the compiled TensorBoard lane; everything else is declared in pyproject.toml.

The extension is optional: where it does not compile (no C compiler, an unusual platform)
the install goes on and trainlens reads TensorBoard files with its numpy reader."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trainlens.readers._tbscan",
            sources=["trainlens/readers/_tbscan.c"],
            optional=True,
        )
    ]
)
