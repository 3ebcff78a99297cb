"""The face: `bertology <command>`'s entry and its one dispatch table (entry.py), help,
completion and override suggestions, sweep checks, and the `runs` and `data` commands. The
fast path (help, a refused config) imports no torch."""
