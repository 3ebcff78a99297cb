"""The second wing: the study. It reads finished run dirs and never builds a model (it imports
no torch): the catalogue of findings, their evidence, the statistics and verdicts,
REPORT.md/html, the scheduler of `make reproduce` and the finding x encoder matrix."""
