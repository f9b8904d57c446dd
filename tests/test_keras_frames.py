"""Keras still calls callbacks through a CallbackList inside `Model.fit(x, ...)`: a release that
does not fails here, instead of the callbacks' checks that rely on it doing nothing."""

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _keras_frames


class _Witness(keras.callbacks.Callback):
  def on_train_begin(self, logs=None):
    self.callbacks = _keras_frames.callback_list()
    self.fit_input = _keras_frames.fit_input()


def test_a_callback_in_fit_finds_its_callback_list_and_fits_input():
  dataset = tf.data.Dataset.from_tensor_slices((np.zeros((8, 2), np.float32), np.zeros(8, np.int64))).batch(4)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  witness, other = _Witness(), keras.callbacks.History()
  model.fit(dataset, verbose=0, callbacks=[other, witness])
  assert isinstance(witness.callbacks, keras.callbacks.CallbackList)
  assert witness.callbacks.callbacks[:2] == [other, witness]
  assert witness.fit_input is dataset


def test_outside_fit_both_are_none():
  witness = _Witness()
  witness.on_train_begin()
  assert witness.callbacks is None and witness.fit_input is None
