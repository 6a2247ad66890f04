"""arvis: fast, faithful decoding for visual autoregressive image and video generators."""

__version__ = "0.1.0"
