"""The study's judging room: the findings and their evidence read from run dirs,
the statistics, each finding's verdict and Holm's correction over a report. No page is
written here."""
