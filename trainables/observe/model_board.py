"""Optional TensorBoard views of the model itself, off by default: histograms of every
parameter after each epoch (`tb_histograms`) and the traced graph (`tb_graph`).  Written by
rank 0 into `tb_dir`, a run of its own beside the trial's scalars (the service uses
<trial folder>/model).  A model that cannot be traced gets a warning, never a failed trial."""
from __future__ import annotations

import logging

import torch
from torch import nn

from trainables.config import TrainConfig

log = logging.getLogger(__name__)


class ModelBoard:
    def __init__(self, cfg: TrainConfig, model: nn.Module, sample: torch.Tensor | None, rank: int):
        self.cfg, self.writer = cfg, None
        if rank != 0 or not (cfg.tb_histograms or cfg.tb_graph) or not cfg.tb_dir:
            return
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(cfg.tb_dir)
        if cfg.tb_graph and sample is not None:
            was_training = model.training
            try:
                model.eval()
                self.writer.add_graph(model, sample)
            except Exception as e:  # noqa: BLE001 - tracing is a view, not the training
                log.warning("the model graph could not be traced for TensorBoard: %s", e)
            finally:
                model.train(was_training)

    def epoch(self, model: nn.Module, epoch: int) -> None:
        if self.writer is None or not self.cfg.tb_histograms:
            return
        for name, p in model.named_parameters():
            self.writer.add_histogram(name, p.detach().float().cpu(), global_step=epoch)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
