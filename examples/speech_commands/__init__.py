"""Simple Audio Recognition (TensorFlow's speech_commands example) with repulsive mini-batches.

Programs: `main` (training), `generate_data` (the espeak-ng dataset) and `summarize` (the
experiment's table and mean curves). Libraries: `train` (`train_and_evaluate`), `input_data`
(data index, split, MFCCs, augmentation), `models` (the "conv" model), `synthesis` (the espeak-ng
dataset) and `summary`.
"""
