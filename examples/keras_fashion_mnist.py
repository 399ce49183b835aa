"""Keras 3 on lazytpu: a CNN on Fashion-MNIST with model.fit.

    .venv/bin/python examples/keras_fashion_mnist.py                  # 8 cores
    .venv/bin/python examples/keras_fashion_mnist.py --cores 1
    .venv/bin/python examples/keras_fashion_mnist.py --device cpu     # eager CPU

Keras's torch backend with `import lazytpu.keras`: every train step is one
cached graph, `steps_per_execution` steps run per call (logs are read on the
host once per call). With --cores 8 the model is built and compiled inside
`lazytpu.keras.strategy(8).scope()` and `fit` trains data parallel on 8
simulated cores, each on 1/8 of every global batch (TPUStrategy-like).
Data: Debian's dataset-fashion-mnist (read as in examples/fashion_mnist.py).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import keras  # noqa: E402

import lazytpu.keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DATA_DIR, load_split  # noqa: E402


def make_model(spe):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=spe)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["lazytpu", "cpu"], default="lazytpu")
    p.add_argument("--cores", type=int, default=8)
    p.add_argument("--batch", type=int, default=256, help="global batch size")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-samples", type=int, default=15360,
                   help="training images used (0: all 60000)")
    p.add_argument("--steps-per-execution", type=int, default=4)
    p.add_argument("--data", default=DATA_DIR)
    args = p.parse_args()

    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "test")
    n = args.train_samples or xtr.shape[0]
    # NHWC for Keras, as NumPy arrays
    xtr, ytr = xtr[:n].permute(0, 2, 3, 1).numpy(), ytr[:n].numpy()
    xte, yte = xte.permute(0, 2, 3, 1).numpy(), yte.numpy()
    steps = n // args.batch

    if args.device == "lazytpu" and args.cores > 1:
        strategy = lazytpu.keras.strategy(args.cores)
        with strategy.scope():
            model = make_model(args.steps_per_execution)
        h = model.fit(xtr, ytr, batch_size=args.batch, epochs=args.epochs, verbose=2)
        epoch_s = strategy.last_epoch_seconds
        print("weights identical on all %d cores: %s"
              % (args.cores, len(set(strategy.last_weight_checksums)) == 1))
        with lazytpu.keras.device(0):
            ev = model.evaluate(xte, yte, batch_size=1000, verbose=0)
    else:
        # Keras's torch backend runs steps_per_execution=1 only on the CPU
        scope = keras.device("cpu") if args.device == "cpu" else lazytpu.keras.device(0)
        spe = 1 if args.device == "cpu" else args.steps_per_execution
        with scope:
            model = make_model(spe)
            epoch_s = []
            for _ in range(args.epochs):       # one fit per epoch, to time each
                t0 = time.perf_counter()
                h = model.fit(xtr, ytr, batch_size=args.batch, epochs=1, verbose=2)
                epoch_s.append(time.perf_counter() - t0)
            ev = model.evaluate(xte, yte, batch_size=1000, verbose=0)
    last = epoch_s[-1]
    print("%s, %d core(s), global batch %d: last epoch %.1fs = %.1f steps/s"
          % (args.device, 1 if args.device == "cpu" else args.cores, args.batch, last,
             steps / last))
    print("test loss %.4f, accuracy %.2f%%" % (ev[0], 100 * ev[1]))
    if args.device == "lazytpu" and args.cores == 1:
        import lazytpu.metrics as met
        print(met.short_metrics_report())


if __name__ == "__main__":
    main()
