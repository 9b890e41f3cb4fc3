"""PyTorch image classification for Azure ML: training, scoring and export share these modules."""

__version__ = "0.1.0"
