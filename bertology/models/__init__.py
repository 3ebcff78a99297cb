"""Models: building a family's pretraining model (families.py's row), task models and their
heads, students for distillation, checkpoint loading (safetensors only) and latency."""
