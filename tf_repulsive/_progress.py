"""Progress bars for one-time preprocessing: shown only for work that outlasts a couple of seconds."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import tqdm

# Work that finishes sooner shows nothing.
DELAY_SECONDS = 2.0
_REFRESH_SECONDS = 0.5


def bar(description: str, total: int | None, verbose: bool) -> tqdm.tqdm:
  """A bar over `total` units (None: a count) that appears after DELAY_SECONDS, on stderr."""
  return tqdm.tqdm(desc=f"tf_repulsive: {description}", total=total, delay=DELAY_SECONDS,
                   disable=not verbose, unit_scale=True, dynamic_ncols=True)


@contextlib.contextmanager
def elapsed(description: str, verbose: bool) -> Iterator[None]:
  """Shows the elapsed time of one long call (a factorisation, say) that reports no progress."""
  done = threading.Event()

  def show():
    if done.wait(DELAY_SECONDS):
      return
    with tqdm.tqdm(desc=f"tf_repulsive: {description}", bar_format="{desc}: {elapsed}",
                   dynamic_ncols=True) as timer:
      while not done.wait(_REFRESH_SECONDS):
        timer.refresh()

  thread = threading.Thread(target=show, daemon=True) if verbose else None
  if thread is not None:
    thread.start()
  try:
    yield
  finally:
    done.set()
    if thread is not None:
      thread.join()
