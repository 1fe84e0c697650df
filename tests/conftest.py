"""Tests run single-threaded: the suite shares 2 cores, and tiny ops are faster on one thread."""

import torch

torch.set_num_threads(1)
