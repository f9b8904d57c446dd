"""The "conv" model of TensorFlow's speech_commands/models.py (`create_conv_model`), in Keras."""

from __future__ import annotations

import keras


def create_conv_model(feature_shape: tuple[int, int], label_count: int,
                      dropout_rate: float = 0.5) -> keras.Model:
  """Conv 20x8x64 ReLU, dropout, max-pool 2x2, conv 10x4x64 ReLU, dropout, dense to logits.

  As in TF (after Sainath & Parada 2015, "cnn-trad-fpool3" without the middle pooling): 'SAME'
  padding, stride 1, weights from a truncated normal with stddev 0.01, zero biases; dropout is
  active in training only (TF's train.py feeds rate 0.5).

  Args:
    feature_shape: (time frames, MFCC coefficients), e.g. (98, 40).
    label_count: number of labels (logits).
    dropout_rate: dropout after each convolution.

  Returns:
    An uncompiled Keras model from `[batch, *feature_shape]` MFCCs to `[batch, label_count]` logits.
  """

  def weights() -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=0.01)

  return keras.Sequential([
      keras.Input(feature_shape),
      keras.layers.Reshape((*feature_shape, 1)),
      keras.layers.Conv2D(64, (20, 8), padding="same", activation="relu",
                          kernel_initializer=weights(), bias_initializer="zeros"),
      keras.layers.Dropout(dropout_rate),
      keras.layers.MaxPooling2D((2, 2), strides=(2, 2), padding="same"),
      keras.layers.Conv2D(64, (10, 4), padding="same", activation="relu",
                          kernel_initializer=weights(), bias_initializer="zeros"),
      keras.layers.Dropout(dropout_rate),
      keras.layers.Flatten(),
      keras.layers.Dense(label_count, kernel_initializer=weights(), bias_initializer="zeros"),
  ], name="conv")
