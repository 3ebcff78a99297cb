"""`bertology data list | fetch NAME... | --all | verify [NAME...]`: the real data sets under
the data root (BERTOLOGY_DATA_DIR, else ~/.cache/bertology/data), against the manifest
(bertology/config/data_sets.json).

Bad input and failed downloads are UserErrors (one line, exit 2, cli/entry.py); so is a verify that
finds a file differing from the manifest or missing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bertology.config.data_sets import DataSet, check_set, data_root, load_manifest
from bertology.data.fetch import fetch_set, mirror_base
from bertology.errors import UserError, require

DATA_USAGE = """bertology data list
       bertology data fetch NAME [NAME ...] | --all
       bertology data verify [NAME ...]

The data root is BERTOLOGY_DATA_DIR (default ~/.cache/bertology/data); fetch reads each file
from its source (or BERTOLOGY_DATA_MIRROR, a URL or folder in the same layout)."""


class DataParser(argparse.ArgumentParser):
    """argparse, its errors as one line (a UserError) instead of usage text."""

    def error(self, message: str):
        raise UserError(f"{message}; see bertology data --help")


# what `bertology data <TAB>` offers: parse_args's verbs and fetch's flag
DATA_WORDS = ("list", "fetch", "verify", "--all")


def complete_data(current: str, args: list[str]) -> tuple[str, ...]:
    return DATA_WORDS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = DataParser(prog="bertology data", usage=DATA_USAGE)
    verbs = parser.add_subparsers(dest="verb")
    verbs.add_parser("list")
    fetch = verbs.add_parser("fetch")
    fetch.add_argument("names", nargs="*")
    fetch.add_argument("--all", action="store_true")
    verify = verbs.add_parser("verify")
    verify.add_argument("names", nargs="*")
    return parser.parse_args(argv)


def chosen(names: list[str]) -> list[DataSet]:
    sets = load_manifest()
    unknown = [name for name in names if name not in sets]
    require(not unknown, f"no data set {unknown[0] if unknown else ''!r}; valid: "
            f"{', '.join(sets)} (bertology data list)")
    return [sets[name] for name in dict.fromkeys(names)]


def data_set_status(data_set: DataSet, root: Path) -> str:
    check = check_set(data_set, root)
    if check.verified:
        return "verified"
    if check.present == 0:
        return "missing"
    problems = [f"{len(check.missing)} missing"] * bool(check.missing) + \
        [f"{len(check.mismatched)} differ"] * bool(check.mismatched)
    return "present, " + ", ".join(problems)


def list_sets(root: Path) -> None:
    print(f"data root: {root}")
    for data_set in load_manifest().values():
        license = data_set.license + (" (non-commercial)" if data_set.non_commercial else "")
        status = data_set_status(data_set, root)
        print(f"{data_set.name:<28} {data_set.bytes / 1e6:6.1f} MB  {status}"
              f"\n    {data_set.what}\n    source: {data_set.source}; license: {license}")


def fetch(names: list[str], every: bool, root: Path) -> None:
    require(bool(names) != every, "name the data sets to fetch, or --all (bertology data list)")
    sets = list(load_manifest().values()) if every else chosen(names)
    mirror = mirror_base()
    source = mirror or "each file's source (the manifest)"
    print(f"data root: {root}; source: {source}")
    for data_set in sets:
        if data_set.non_commercial:
            print(f"{data_set.name}: license {data_set.license}: NON-COMMERCIAL use only; "
                  f"read {root / data_set.name / (data_set.license_file or 'README.md')}")
        start = time.perf_counter()
        fetched = fetch_set(data_set, root, mirror)
        print(f"{data_set.name}: {fetched} of {len(data_set.files)} files fetched, verified "
              f"({time.perf_counter() - start:.1f} s)")


def verify(names: list[str], root: Path) -> None:
    sets = chosen(names) if names else list(load_manifest().values())
    bad = []
    for data_set in sets:
        check = check_set(data_set, root)
        if not names and check.present == 0:
            print(f"{data_set.name}: not fetched")
            continue
        for path in check.missing:
            print(f"{data_set.name}/{path}: missing")
        for path in check.mismatched:
            print(f"{data_set.name}/{path}: sha256 differs from the manifest")
        print(f"{data_set.name}: {'verified' if check.verified else 'FAILED'}")
        bad += [f"{data_set.name}/{p}" for p in (*check.mismatched, *check.missing)]
    require(not bad, f"{len(bad)} file(s) missing or differing from the manifest under {root}, "
            f"first {bad[0] if bad else ''}; rerun `bertology data fetch` for the set")


def main(argv: list[str]) -> None:
    """`bertology data ...`; bad input and failures raise UserError."""
    args = parse_args(argv)
    root = data_root()
    if args.verb == "list":
        list_sets(root)
    elif args.verb == "fetch":
        fetch(args.names, args.all, root)
    elif args.verb == "verify":
        verify(args.names, root)
    else:
        print(f"usage: {DATA_USAGE}")
