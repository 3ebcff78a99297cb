"""`make reproduce` (`python -m bertology.reproduce`): every study the findings read, at CPU
scale, then `bertology report` over them; studies.py runs them, __main__.py is the entry."""
