"""The trial runtime: the Tune trainable, the session seam to Ray, DDP ranks, preflight checks, storage and checkpoints."""
