"""Tiny PyTorch models the export tests name as Python references (``export_models.py:cnn``).

A helper module, not a test module (no ``test_`` prefix, no tests): export runs it as a source file
in its own right, so it holds only the models; builders shared by test modules live in helpers.py.
"""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Conv + BatchNorm (with non-trivial running stats) + pooling + linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 5)
        for bn in (self.features[1], self.features[5]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class SmallLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lstm = nn.LSTM(6, 12, batch_first=True)
        self.eval()

    def forward(self, x):
        return self.lstm(x)


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)

    def forward(self, left, right):
        return {"total": self.a(left) + self.b(right), "product": self.a(left) * self.b(right)}


class ArgmaxNet(nn.Module):
    """Integer output only: the class ids must match exactly."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.fc = nn.Linear(10, 7)

    def forward(self, x):
        return torch.argmax(self.fc(x), dim=-1)


class HistogramNet(nn.Module):
    """Uses aten::histc, which neither ONNX exporter can convert."""

    def forward(self, x):
        return torch.histc(x, bins=4)


class BatchDependent(nn.Module):
    """Python control flow on the batch size: a traced export bakes in one branch, so verification must catch it."""

    def forward(self, x):
        if x.shape[0] > 2:
            return x * 2.0
        return x - 1.0


cnn = SmallCNN()
lstm = SmallLSTM()
argmax_net = ArgmaxNet()
histogram_net = HistogramNet()
batch_dependent = BatchDependent()


def make_two_in_two_out() -> nn.Module:
    """A zero-argument factory, as a user might write one."""
    return TwoInTwoOut().eval()


not_a_model = [1, 2, 3]


class LastHiddenState(nn.Module):
    """A transformers encoder called with keyword inputs, returning only ``last_hidden_state``.

    Tests that export a transformers model by hand with ``torch.onnx.export`` use it, because the
    model's own ``forward`` takes more positional parameters than the three inputs.
    """

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state


class DigitsNet(nn.Module):
    """A tiny CNN on scikit-learn's 8x8 digits (helpers.fragile_digits trains it and makes it fragile)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))
