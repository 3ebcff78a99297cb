"""`python -m bertology` is the `bertology` command."""

from bertology.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
