"""`python -m bertology.reproduce` (what `make reproduce` runs): the study's
schedule/command.py."""

from bertology.study.schedule.command import main

if __name__ == "__main__":
    raise SystemExit(main())
