"""The documentation speaks the package's API: its examples run, and the names and arguments they use exist."""

import ast
import inspect
import pathlib
import re

import pytest

import tf_repulsive

ROOT = pathlib.Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_CODE = re.compile(r"```python\n(.*?)```", re.DOTALL)
# Callables whose keyword arguments the pages' code is checked against.
_CHECKED_CALLS = {"repulsive_batch": tf_repulsive.repulsive_batch, "BatcherOptions": tf_repulsive.BatcherOptions,
                  "ModelSpace": tf_repulsive.ModelSpace, "AnnealingCallback": tf_repulsive.AnnealingCallback,
                  "BatchStreamCallback": tf_repulsive.BatchStreamCallback,
                  "ActiveBiasCallback": tf_repulsive.ActiveBiasCallback,
                  "compute_features": tf_repulsive.compute_features,
                  "EpochPruning": tf_repulsive.EpochPruning, "RandomPruning": tf_repulsive.RandomPruning,
                  "RS2": tf_repulsive.RS2, "Importance": tf_repulsive.Importance,
                  "RecordingModel": tf_repulsive.RecordingModel, "OnlineImportance": tf_repulsive.OnlineImportance}


def _blocks(page):
  return _CODE.findall(page.read_text())


def _calls():
  """(page, call name, keyword names) of every checked call in the pages' Python blocks."""
  for page in PAGES:
    for block in _blocks(page):
      for node in ast.walk(ast.parse(block)):
        if isinstance(node, ast.Call):
          name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
          if name in _CHECKED_CALLS:
            yield page.relative_to(ROOT), name, [keyword.arg for keyword in node.keywords if keyword.arg]


def test_every_python_block_of_the_pages_parses():
  for page in PAGES:
    for block in _blocks(page):
      ast.parse(block)  # raises SyntaxError naming the line


def test_every_tf_repulsive_name_the_pages_use_exists():
  missing = set()
  for page in PAGES:
    for name in re.findall(r"tf_repulsive\.((?:diagnostics\.)?[A-Za-z_][A-Za-z0-9_]*)", page.read_text()):
      owner, _, attribute = name.rpartition(".")
      if not hasattr(tf_repulsive.diagnostics if owner else tf_repulsive, attribute):
        missing.add((str(page.relative_to(ROOT)), name))
  assert not missing


@pytest.mark.parametrize("page, name, keywords", [pytest.param(*call, id=f"{call[0]}-{call[1]}") for call in _calls()])
def test_the_pages_call_with_arguments_that_exist(page, name, keywords):
  parameters = inspect.signature(_CHECKED_CALLS[name]).parameters
  assert set(keywords) <= set(parameters), f"{page}: {name}() takes no {set(keywords) - set(parameters)}"


@pytest.mark.slow
def test_the_readme_example_runs_and_trains_on_the_batches():
  (example,) = _blocks(ROOT / "README.md")
  namespace = {}
  exec(compile(example.replace("callbacks=[", "verbose=0, callbacks=["), "README.md", "exec"), namespace)  # noqa: S102
  batcher, model = namespace["batcher"], namespace["model"]
  assert int(model.optimizer.iterations) == 5 * batcher.steps_per_epoch
  assert batcher.stats().last_step_delivered == 5 * batcher.steps_per_epoch - 1
