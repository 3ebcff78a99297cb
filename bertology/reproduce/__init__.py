"""`python -m bertology.reproduce` (what `make reproduce` runs): a shim kept for that command;
the scheduler is bertology/study/schedule/command.py."""
