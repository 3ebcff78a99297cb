"""The report's nouns: finished runs and their item replicates, evidence read from them, the
statistics and verdicts of the survey's findings (conf/experiment/finding_*.yaml), and the
REPORT.md, tables and figures that show them."""
