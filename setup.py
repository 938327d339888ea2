"""Build of the compiled TensorBoard, W&B and JSONL lanes, the guard for mapped reads and
the monitor's entropy; everything else is declared in pyproject.toml.

The extensions are optional: where they do not compile (no C compiler, an unusual
platform) the install goes on and trainlens reads TensorBoard and W&B files with its
numpy readers and JSONL files with polars alone, and the monitor takes the entropy with
torch's ops."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trainlens.readers._mapguard",
            sources=["trainlens/readers/_mapguard.c"],
            optional=True,
        ),
        Extension(
            "trainlens.readers._tbscan",
            sources=["trainlens/readers/_tbscan.c"],
            depends=["trainlens/readers/_arrow_column.h", "trainlens/readers/_tbcrc.h"],
            optional=True,
        ),
        Extension(
            "trainlens.readers._wbscan",
            sources=["trainlens/readers/_wbscan.c"],
            depends=[
                "trainlens/readers/_arrow_column.h",
                "trainlens/readers/_wbcrc.h",
                "trainlens/readers/_wbfloat.h",
                "trainlens/readers/_pow5.h",
            ],
            optional=True,
        ),
        Extension(
            "trainlens.monitor._entropy",
            sources=["trainlens/monitor/_entropy.c"],
            optional=True,
        ),
        Extension(
            "trainlens.readers._jlscan",
            sources=["trainlens/readers/_jlscan.c"],
            depends=[
                "trainlens/readers/_arrow_column.h",
                "trainlens/readers/_wbfloat.h",
                "trainlens/readers/_pow5.h",
            ],
            optional=True,
        ),
    ]
)
