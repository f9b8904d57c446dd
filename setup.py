"""tf_repulsive: active mini-batch sampling with repulsive point processes for tf.data / Keras."""

import pathlib
import re

import setuptools

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(r'__version__ = "([^"]+)"', (_HERE / "tf_repulsive" / "__init__.py").read_text()).group(1)


def _tested(package: str, constant: str) -> str:
  """`package` within the releases tf_repulsive is tested on: the range `constant` of tf_repulsive/_framework.py."""
  framework = (_HERE / "tf_repulsive" / "_framework.py").read_text()
  oldest, newest = re.search(rf'{constant} = \("([0-9.]+)", "([0-9.]+)"\)', framework).groups()
  major, minor = newest.split(".")
  return f"{package}>={oldest},<{major}.{int(minor) + 1}"


setuptools.setup(
    name="tf_repulsive",
    version=_VERSION,
    description=("Active mini-batch sampling with repulsive point processes (Poisson disk sampling) "
                 "for tf.data and Keras."),
    long_description=(_HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["tf_repulsive", "tf_repulsive.*"]),
    python_requires=">=3.10",
    # TensorFlow itself comes from an extra: `cpu` (tensorflow-cpu) or `gpu` (tensorflow), so that
    # installing one does not pull in the other.
    install_requires=[
        "numpy>=1.24",
        # The tested range, which the package's guard on framework internals also names.
        _tested("keras", "TESTED_KERAS"),
        # Progress bars for long one-time preprocessing (delayed, on stderr); tensorflow-datasets
        # depends on it too.
        "tqdm>=4.60",
    ],
    extras_require={
        "cpu": [_tested("tensorflow-cpu", "TESTED_TENSORFLOW")],
        "gpu": [_tested("tensorflow", "TESTED_TENSORFLOW")],
        # tensorflow-datasets imports importlib_resources but declares it only for Python < 3.9.
        "datasets": ["tensorflow-datasets>=4.9", "importlib_resources"],
        # The examples' programs take absl flags and generate or split their data with scikit-learn;
        # mnist1d generates MNIST-1D offline from its templates (examples/mnist_deep, --dataset=mnist1d).
        "examples": ["matplotlib>=3.7", "tensorboard>=2.16", "absl-py>=1.4", "scikit-learn>=1.3", "mnist1d>=0.0.2"],
        # The test command also lints (ruff) and type-checks the package (mypy); see scripts/test.sh.
        # hypothesis generates the element structures and compositions of tests/integration/test_properties.py;
        # the tests' fixtures use absl flags and scikit-learn datasets, as the examples they run do.
        # sphinx builds the docs site (docs/, warnings as errors) in scripts/test.sh; < 9.1: the versions checked.
        # myst-parser: the guide and results pages are Markdown, their tables and commands readable in the repo too.
        # pytest-xdist runs the suite on two processes (scripts/test.sh), one per core; pytest >= 9
        # ends a hung test's process (faulthandler_exit_on_timeout in pytest.ini). pytest < 9.2:
        # pytest-xdist 3.8 groups a module's tests into one process through a node attribute that
        # pytest 9.2 no longer reads (tests/conftest.py refuses a run where the groups are lost).
        # tensorboard: the callbacks' tests write TensorBoard logs (TensorFlow 2.21 does not bring it).
        # jax runs the tests of fit on Keras' JAX backend (tests/integration/test_backends.py; the PyTorch backend
        # has its own environment, see scripts/setup_env.sh).
        "test": ["pytest>=9,<9.2", "ruff>=0.5", "mypy>=1.10", "hypothesis>=6.100", "absl-py>=1.4", "tensorboard>=2.16",
                 "scikit-learn>=1.3", "sphinx>=7.2,<9.1", "myst-parser>=4",
                 "jax[cpu]>=0.4.30", "pytest-xdist>=3.5"],
        # An outside exact k-DPP sampler for the Table 1 benchmark (benchmarks/table1/).
        "reference": ["dppy>=0.3"],
    },
    license="Apache-2.0",
)
