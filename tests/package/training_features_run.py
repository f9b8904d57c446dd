"""One process of the new-process resume of features from the training step.

`python training_features_run.py first|resume WORKDIR`: `first` trains steps 0 ... 15 of a custom
loop (a `ModelSpace(from_training_step=True)` batcher with a directory), writes a checkpoint of the
model, optimizer and iterator after step 6, and the batch indices of steps 7 ... 15; `resume`
builds everything anew, restores that checkpoint (the table comes from the directory), trains
steps 7 ... 15 and writes their batch indices. WORKDIR/<phase>.json: {"indices": [[...], ...]}.
"""

import json
import pathlib
import sys

import tensorflow as tf

import test_training_features as cases

RESUME_AT = 7
STEPS = 16


def main(phase, workdir):
  workdir = pathlib.Path(workdir)
  x, y = cases._data()  # pylint: disable=protected-access
  model = cases._model()  # pylint: disable=protected-access
  model.optimizer.build(model.trainable_variables)
  batcher = cases._batcher(model, directory=workdir / "refreshes")  # pylint: disable=protected-access
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = cases._trainer(model, batcher)  # pylint: disable=protected-access
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, iterator=iterator)
  if phase == "first":
    cases._train(batcher, trainer, iterator, RESUME_AT)  # pylint: disable=protected-access
    checkpoint.write(str(workdir / "ckpt"))
  else:
    checkpoint.read(str(workdir / "ckpt")).assert_consumed()
  indices, _ = cases._train(batcher, trainer, iterator, STEPS - RESUME_AT, first=RESUME_AT)  # pylint: disable=protected-access
  (workdir / f"{phase}.json").write_text(json.dumps({"indices": [batch.tolist() for batch in indices]}))


if __name__ == "__main__":
  main(*sys.argv[1:])
