"""Small data sets in the real CIFAR-10 python format, written by tests (nothing is downloaded)."""
import pickle
from pathlib import Path

import numpy as np

CIFAR_DIR = "cifar-10-batches-py"   # as torchvision (and trainables.data.sources) name it
CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cifar(root: Path, per_batch: int = 20, n_test: int = 30, seed: int = 0) -> dict:
    """A small data set in the real CIFAR-10 python format (pickled dicts with str keys,
    'data' as uint8 rows of 3072 = 3x32x32 channel-major pixels)."""
    folder = root / CIFAR_DIR
    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    xs, ys = [], []
    for i in range(1, 6):
        x = g.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = [int(v) for v in g.integers(0, 10, per_batch)]
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump({"batch_label": f"training batch {i} of 5", "labels": y, "data": x,
                         "filenames": [f"img_{i}_{j}.png" for j in range(per_batch)]}, f, protocol=2)
        xs.append(x), ys.extend(y)
    xt = g.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    yt = [int(v) for v in g.integers(0, 10, n_test)]
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({"batch_label": "testing batch 1 of 1", "labels": yt, "data": xt}, f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CIFAR_CLASSES, "num_cases_per_batch": per_batch, "num_vis": 3072}, f, protocol=2)
    return {"train_x": np.concatenate(xs).reshape(-1, 3, 32, 32), "train_y": np.array(ys),
            "test_x": xt.reshape(-1, 3, 32, 32), "test_y": np.array(yt)}
