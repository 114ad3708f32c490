"""Installs the ztune Python SDK (stdlib only, no dependencies).

There is deliberately no pyproject.toml with a [build-system] table: pip
would then build in an isolated environment and download setuptools, which
fails on the offline machines trainables often run on. Without it, pip
uses the setuptools (and wheel) already installed:

    python3 -m pip install --no-index ./python
"""

import os

from setuptools import setup


def _version():
    # Read, not import: importing the package at build time would run its
    # __init__, which is needless work and fragile inside a build.
    namespace = {}
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "ztune", "version.py"), encoding="utf-8") as f:
        exec(f.read(), namespace)
    return namespace["__version__"]


setup(
    name="ztune",
    version=_version(),
    description="Python SDK for ztune process trainables (class and function API)",
    long_description=open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=["ztune"],
    python_requires=">=3.9",
    install_requires=[],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
