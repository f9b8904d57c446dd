import quickstart


def test_quickstart_learns_with_uniform_and_repulsive_batches():
  # Chance is 0.1; two epochs of SGD on the digits get well above it with either sampler.
  for name in ("uniform", "vanilla_pds"):
    assert quickstart.train_and_evaluate(name, epochs=2, batch_size=50, seed=0, verbose=0) > 0.4
