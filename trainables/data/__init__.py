"""Data: the datasets and their HDF5 cache (sources), and the loaders that feed the step (loaders)."""
