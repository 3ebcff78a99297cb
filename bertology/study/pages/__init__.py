"""The study's pages: REPORT.md and REPORT.html, SUMMARY.md, the layer curves, the
encoder matrix, the stability check between two reports and the published results pages,
all written from judged findings."""
