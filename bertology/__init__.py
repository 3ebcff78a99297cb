"""bertology: an experiment runner for studying BERT-family encoders."""

__version__ = "0.1.0"
