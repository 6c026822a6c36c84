"""Tests run on small tensors, where one thread beats two contending OpenMP threads."""

import torch

torch.set_num_threads(1)
