"""`python -m bertology.reproduce` (what `make reproduce` runs): bertology/reproduce/studies.py."""

from bertology.reproduce.studies import main

if __name__ == "__main__":
    raise SystemExit(main())
