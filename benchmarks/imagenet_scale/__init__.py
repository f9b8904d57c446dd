"""The ImageNet-shaped pipeline: sample (path, label, features) records, decode images afterwards."""
