"""The one compiled part of gpulens: the trace loader's slice scanner (analyze/traces/_scan.c).

Optional: without a C compiler the package still installs, and the loader decodes every slice
in Python (the same results, slower). Everything else is configured in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gpulens.analyze.traces._scan",
            sources=["src/gpulens/analyze/traces/_scan.c"],
            optional=True,
        )
    ]
)
