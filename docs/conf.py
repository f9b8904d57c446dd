"""Sphinx configuration of the documentation site: the guide in Markdown, the API reference from the docstrings.

scripts/test.sh builds it with warnings as errors.
"""

import os
import pathlib
import sys

_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
# TensorFlow's C++ start-up messages are noise in the build log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_repulsive  # noqa: E402

project = "tf_repulsive"
author = "tf_repulsive authors"
copyright = "tf_repulsive authors"
release = tf_repulsive.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# The docstrings are Google style and write names in single backticks: those become Python
# cross references (rendered as code; a link where the name is documented here).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
default_role = "py:obj"

# The guide and results pages are Markdown (MyST), the API reference reStructuredText.
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# Anchors for headings down to level 3, so that pages link to each other's sections
# (`guide/resuming.md#iterator-checkpoints`), as they do on GitHub.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
# The callbacks override Keras' hooks (on_epoch_end, ...): Keras' docstrings are not this API.
autodoc_inherit_docstrings = False
# Signatures name types without their (often private) modules: Sampler, not tf_repulsive._contract.Sampler.
python_use_unqualified_type_names = True

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = f"tf_repulsive {release}"
html_static_path: list[str] = []


def _public_base(base: type) -> type:
  """`base`, or for a private class of the package (DiskSampler, ...) its nearest public base."""
  for cls in base.__mro__:
    if not cls.__module__.startswith("tf_repulsive") or getattr(tf_repulsive, cls.__name__, None) is cls:
      return cls
  return base


def _show_public_bases(app, name, obj, options, bases) -> None:
  """Lists as bases what users can import, not the package's private intermediate classes."""
  del app, name, obj, options
  bases[:] = list(dict.fromkeys(_public_base(base) for base in bases))


def setup(app):
  app.connect("autodoc-process-bases", _show_public_bases)
