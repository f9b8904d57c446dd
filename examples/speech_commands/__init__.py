"""Simple Audio Recognition (TensorFlow's speech_commands example) with repulsive mini-batches.

Modules: `input_data` (data index, split, MFCCs, augmentation), `models` (the "conv" model),
`synthesis` (the espeak-ng dataset), binaries `generate_data` and `train`.
"""
