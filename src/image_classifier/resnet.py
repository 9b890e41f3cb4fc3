"""The ResNet family for scoring, on torch alone: a scoring process serving model.pt need not
import torchvision.

Importing any part of torchvision imports all of it, and its detection ops import
torch._dynamo: 1.6-1.9 CPU s in every scoring process before init() (about as much as torch
itself), on every start of a batch worker or an online replica. model.pt holds a state dict
and the architecture's name; for the architectures here the network is rebuilt from this
module instead, with torchvision's module names and shapes, so the same state dict loads
unchanged and gives the same numbers (tests/unit/test_resnet.py compares them with
torchvision's on every architecture listed). Training, export and any other architecture
build through torchvision (model.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A ResNet variant: residual blocks per stage, bottleneck or not, and the bottleneck's
    grouped-convolution shape (ResNeXt: groups; wide ResNet: width per group)."""

    blocks: tuple[int, int, int, int]
    bottleneck: bool
    groups: int = 1
    width_per_group: int = 64


ARCHS = {
    "resnet18": Shape(blocks=(2, 2, 2, 2), bottleneck=False),
    "resnet34": Shape(blocks=(3, 4, 6, 3), bottleneck=False),
    "resnet50": Shape(blocks=(3, 4, 6, 3), bottleneck=True),
    "resnet101": Shape(blocks=(3, 4, 23, 3), bottleneck=True),
    "resnet152": Shape(blocks=(3, 8, 36, 3), bottleneck=True),
    "resnext50_32x4d": Shape(blocks=(3, 4, 6, 3), bottleneck=True, groups=32,
                             width_per_group=4),
    "resnext101_32x8d": Shape(blocks=(3, 4, 23, 3), bottleneck=True, groups=32,
                             width_per_group=8),
    "resnext101_64x4d": Shape(blocks=(3, 4, 23, 3), bottleneck=True, groups=64,
                             width_per_group=4),
    "wide_resnet50_2": Shape(blocks=(3, 4, 6, 3), bottleneck=True, groups=1,
                             width_per_group=128),
    "wide_resnet101_2": Shape(blocks=(3, 4, 23, 3), bottleneck=True, groups=1,
                             width_per_group=128),
}


def _conv(inputs: int, outputs: int, size: int, *, stride: int = 1, groups: int = 1
          ) -> nn.Conv2d:
    return nn.Conv2d(inputs, outputs, size, stride=stride, padding=size // 2, groups=groups,
                     bias=False)


class Block(nn.Module):
    """One residual block: two 3x3 convolutions (basic), or 1x1, grouped 3x3, 1x1 (bottleneck,
    the stride on the 3x3), each batch-normalized; `downsample` matches the shortcut's shape."""

    def __init__(self, inputs: int, planes: int, stride: int, shape: Shape):
        super().__init__()
        outputs = planes * (4 if shape.bottleneck else 1)
        if shape.bottleneck:
            width = planes * shape.width_per_group // 64 * shape.groups
            sizes = [(inputs, width, 1, 1, 1), (width, width, 3, stride, shape.groups),
                     (width, outputs, 1, 1, 1)]
        else:
            sizes = [(inputs, planes, 3, stride, 1), (planes, planes, 3, 1, 1)]
        for index, (a, b, size, step, groups) in enumerate(sizes, start=1):
            setattr(self, f"conv{index}", _conv(a, b, size, stride=step, groups=groups))
            setattr(self, f"bn{index}", nn.BatchNorm2d(b))
        self.stages = len(sizes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(_conv(inputs, outputs, 1, stride=stride),
                                            nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for index in range(1, self.stages + 1):
            out = getattr(self, f"bn{index}")(getattr(self, f"conv{index}")(out))
            if index < self.stages:
                out = self.relu(out)
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(out + shortcut)


class ResNet(nn.Module):
    def __init__(self, shape: Shape, num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inputs = 64
        for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), shape.blocks,
                                                    strict=True), start=1):
            blocks = []
            for index in range(count):
                blocks.append(Block(inputs, planes, 2 if index == 0 and stage > 1 else 1,
                                    shape))
                inputs = planes * (4 if shape.bottleneck else 1)
            setattr(self, f"layer{stage}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inputs, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(arch: str, num_classes: int) -> ResNet:
    """`arch` (one of ARCHS) with a `num_classes` head, as model.build_model shapes it."""
    return ResNet(ARCHS[arch], num_classes)
