"""The training step: TrainStep (AMP, accumulation, clipping), the models, pruning and the Triton kernels."""
