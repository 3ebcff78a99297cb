"""The front page and docs/ stay true: every relative link in README.md and docs/*.md resolves
(the file, and a #anchor to a heading of it, by GitHub's slugs), and every `bertology ...`
command in their fenced code blocks composes and passes the config check `bertology` runs
before it makes a run dir (cli.precheck), without running anything.

A command's placeholders stand for real paths: `<date>/<time>` is a run's stamp and `<run>` a
pretrain run dir; every path under outputs/ that a command reads becomes a real checkpoint
(a tiny BERT saved by transformers, for pretraining under outputs/pretrain/, for sentence
classification elsewhere) or a folder, in a scratch dir the command is checked from. A `-m`
sweep is checked as `bertology` checks it, every job (the command line's comma lists times
its experiment's hydra.sweeper.params) before the first starts. A command followed in its
block by the error line it prints (`bertology X: error: ...`) must be refused with exactly
that line. `bertology data`, `bertology runs` and `bertology convert` are checked on a dry
path: their arguments parsed, the data set names known, the dirs present. The own-data files a
command names (task.train_file, task.eval_file) are written in the scratch dir in their format.
"""

from __future__ import annotations

import re
import shlex
import shutil
import unicodedata
from pathlib import Path

import pytest
from conftest import REPO, fast_sample, tiny_tokenizer
from hub_cache import documented_cache
from own_data_files import write_example

from bertology.cli import reference
from bertology.cli.entry import SWEEP_FLAGS, dirs_overrides, precheck
from bertology.cli.help import format_usage
from bertology.cli.sweep import check_sweep
from bertology.config.verbs import VERBS, load_config_check, pipeline_names
from bertology.errors import UserError
from bertology.study.pages.publish import (
    block_markers,
    published,
    readme_block,
    render_results_page,
)

# the front page, docs/ (each linked from the front page) and docs/howto/ (one task a page,
# each linked from a page of docs/): the manual, whose commands are checked; and docs/history/
# (each earlier run's dated account, each linked from a page), whose links are checked
FRONT_PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HOWTO_PAGES = sorted((REPO / "docs" / "howto").glob("*.md"))
REFERENCE_PAGES = sorted((REPO / "docs" / "reference").glob("*.md"))  # generated from the code
HISTORY_PAGES = sorted((REPO / "docs" / "history").glob("*.md"))
PAGES = [*FRONT_PAGES, *HOWTO_PAGES, *REFERENCE_PAGES]
# the pages whose commands are composed (the reference's CLI page quotes usage lines, not commands)
COMMAND_PAGES = [*FRONT_PAGES, *HOWTO_PAGES]
STAMP = "2026-01-01/00-00-00"
# <checkpoint>: a checkpoint folder of the reader's (made in the scratch dir as outputs/ paths are)
PLACEHOLDERS = {"<date>/<time>": STAMP, "<run>": f"outputs/pretrain/{STAMP}",
                "<checkpoint>": "outputs/checkpoint/model"}
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
ERROR_LINE = re.compile(r"bertology [\w-]+: error: ")
COMMAND_WORDS = ("bertology", ".venv/bin/bertology", "python", "accelerate", "torchrun")
# keys whose value a run writes to, not reads: no checkpoint is made for them
WRITTEN_KEYS = ("hydra.run.dir", "hydra.sweep.dir")


# ------------------------------------------------------------------ reading the pages


def prose_lines(text: str, code_spans: bool = False) -> list[str]:
    """The lines outside fenced code blocks, inline code spans removed unless asked for."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line if code_spans else CODE_SPAN.sub("", line))
    return lines


def code_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (links and code marks dropped),
    lower-cased, punctuation other than - and _ removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor (a repeated heading gets -1, -2, ..., as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text(), code_spans=True):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for line in prose_lines(page.read_text()) for m in LINK.finditer(line)]


def broken_link(page: Path, target: str) -> str | None:
    """Why a relative link does not resolve, or None. Absolute URLs are not checked."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.exists():
        return f"{target}: {resolved.relative_to(REPO)} does not exist"
    if not resolved.is_relative_to(REPO):
        return f"{target}: points outside the repository"
    if anchor:
        if resolved.suffix != ".md":
            return f"{target}: an anchor into a file that is not Markdown"
        if anchor not in anchors(resolved):
            return f"{target}: {resolved.name} has no heading #{anchor}"
    return None


def test_the_front_page_is_short_and_has_a_figure_and_contents():
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 15_000, "README.md is a front page: at most ~15 KB"
    images = [t for t in links(REPO / "README.md")
              if t.split("#")[0].endswith((".png", ".svg", ".jpg"))]
    assert images, "the front page shows a figure"
    for image in images:
        assert (REPO / image).stat().st_size < 200_000, f"{image}: keep it under 200 KB"
    linked = {(REPO / t.split("#")[0]).resolve() for t in links(REPO / "README.md")}
    missing = [p.name for p in FRONT_PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"the front page's contents do not link {missing}"


def linked_from(pages: list[Path]) -> set[Path]:
    return {(page.parent / t.split("#")[0]).resolve() for page in pages
            for t in links(page) if not re.match(r"[a-z][a-z0-9+.-]*:", t)}


def test_every_howto_page_is_linked_from_another_page():
    missing = [p.name for p in HOWTO_PAGES if p.resolve() not in linked_from(FRONT_PAGES)]
    assert not missing, f"no page of docs/ links the how-to pages {missing}"


def test_every_history_page_is_linked():
    """A run's dated record is reached from the manual (docs/reproduce.md links the history's
    index) or from another record."""
    linked = linked_from([*FRONT_PAGES, *HISTORY_PAGES])
    missing = [p.name for p in HISTORY_PAGES if p.resolve() not in linked]
    assert not missing, f"no page links the history pages {missing}"
    assert (REPO / "docs" / "history" / "README.md").resolve() in linked_from(FRONT_PAGES)


@pytest.mark.parametrize("page", [*PAGES, *HISTORY_PAGES],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    problems = [why for target in links(page) if (why := broken_link(page, target))]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the manual is not a diary

PAGE_CAP = 40_000  # bytes: a page of docs/ above it is a page to split by topic
# pages of docs/ allowed over PAGE_CAP for now, each with why it cannot be cut yet: none
OVER_CAP: dict[str, str] = {}
# what belongs in a dated record of docs/history/, not in the manual
HISTORY_MARKS = {
    "an issue stub": re.compile(r"<!--\s*issue", re.I),
    "an issue number": re.compile(r"\bissues?\s+#?\d+", re.I),
    # 7 to 40 hex digits with a letter and a digit among them (not a number, not a word)
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "a machine path": re.compile(r"(?<![\w.~<>-])/(?:work|tmp|home|root|scratch|mnt)/"),
}
# a run's provenance names its commit: the `| commit |` row of a results page's run header
# (docs/reproduce.md) and the stamps that bench/default_runs.py and
# tests/helpers/reliability_tables.py write above the tables they generate
PROVENANCE = re.compile(
    r"^(\| commit \||Measured at [0-9a-f]+ on |\*Tables written by the tests at )")


def over_cap(text: str) -> bool:
    return len(text.encode()) > PAGE_CAP


def history_marks(text: str, marks: tuple[str, ...] = tuple(HISTORY_MARKS)) -> list[str]:
    """'line n: what' for each of the marks (issue stubs, issue numbers, commit hashes, machine
    paths) outside a provenance line."""
    return [f"line {n}: {what} ({match.group(0)!r})"
            for n, line in enumerate(text.splitlines(), 1) if not PROVENANCE.match(line)
            for what in marks if (match := HISTORY_MARKS[what].search(line))]


def test_no_page_of_docs_is_over_40_kb():
    """A page of docs/ over PAGE_CAP (reproduce.md had grown to 145 KB of superseded runs) is
    split by topic, or its history moved to docs/history/."""
    big = {p.name: p.stat().st_size for p in FRONT_PAGES[1:]
           if over_cap(p.read_text()) and p.name not in OVER_CAP}
    assert not big, f"pages over {PAGE_CAP:,} bytes: {big}; split them by topic"


@pytest.mark.parametrize("page", [*FRONT_PAGES, *HOWTO_PAGES],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_manual_keeps_no_history(page):
    """No issue stub, issue number, commit hash or machine path in the manual: each run's
    account is a dated record in docs/history/, which may keep them."""
    # a how-to's example shows a reader's own files (/home/me/films/train.csv)
    kinds = tuple(k for k in HISTORY_MARKS if page in FRONT_PAGES or k != "a machine path")
    marks = history_marks(page.read_text(), kinds)
    assert not marks, f"{page.name}: move these to docs/history/ or drop them: {marks}"


def test_the_history_checks_catch_what_they_are_for():
    """Each check fails on a planted violation and passes what looks like one but is not."""
    assert over_cap("x" * (PAGE_CAP + 1)) and not over_cap("x" * PAGE_CAP)
    assert over_cap("é" * (PAGE_CAP // 2 + 1))  # bytes, not characters
    planted = {"<!-- issue 30 point 2: more goes here -->": "an issue stub",
               "what changed (issue 21)": "an issue number", "Issues 38 and 39": "an issue number",
               "a clean worktree at 3dd5052": "a commit hash",
               "judged at e92bfc8f, 2026-11-26": "a commit hash",
               "`--out /work/confirm/run`": "a machine path",
               "run dir: /tmp/x/outputs": "a machine path"}
    for text, what in planted.items():
        assert [m for m in history_marks(text) if what in m], text
    for text in ("| commit | 3dd5052, a clean worktree |", "Measured at 0241cb7 on 2026-11-28",
                 "*Tables written by the tests at ec8a5ff, 2026-12-06.*",
                 "4.0e13 FLOPs over 1,000,000 tokens, 2026-12-06 03:55", "a decade, deadbeef",
                 "the issue's random-init twin", "<tmp>/run/checkpoints", "~/.cache/bertology",
                 "bench/RESULTS.md#bf16-issue-40", "seeds 2209, 211, 2213"):
        assert not history_marks(text), text


def test_slugs_follow_github():
    assert slug("Pretraining: `bertology pretrain`") == "pretraining-bertology-pretrain"
    assert slug("I/O errors") == "io-errors"
    assert slug("The bars (issue 21): where_it is") == "the-bars-issue-21-where_it-is"
    assert slug("Notes: ELECTRA at the sanity budget") == "notes-electra-at-the-sanity-budget"


# ------------------------------------------------------------------ the commands


def commands_in(text: str) -> list[tuple[list[str], str | None]]:
    """(bertology's arguments, the error line shown after it or None) for every command
    line in the text's code blocks: `bertology ...`, `.venv/bin/bertology ...`, `$ bertology
    ...`, `python -m bertology ...` and `accelerate launch ... -m bertology ...`."""
    found = []
    for block in code_blocks(text):
        lines = " \n".join(block).replace("\\ \n", " ").split(" \n")  # join continuations
        for i, line in enumerate(lines):
            line = line.strip().removeprefix("$ ")
            if line.split(" ", 1)[0] not in COMMAND_WORDS or ERROR_LINE.match(line):
                continue  # prose, a tree, an error line
            args = bertology_args(shlex.split(line, comments=True))
            if args is None:
                continue
            after = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found.append((args, after if ERROR_LINE.match(after) else None))
    return found


def bertology_args(words: list[str]) -> list[str] | None:
    if not words or words[0] not in COMMAND_WORDS:
        return None
    if words[0] == "python" and len(words) > 1 and words[1].endswith(".py"):
        return None  # a script (bench/...), whose arguments may name an arm "bertology"
    for i, word in enumerate(words):
        if word == "bertology" or word.endswith("/bertology"):
            return words[i + 1:]
        if word == "-m" and i + 1 < len(words) and words[i + 1] == "bertology":
            return words[i + 2:]
    return None


def fill(args: list[str]) -> list[str]:
    filled = []
    for arg in args:
        for placeholder, value in PLACEHOLDERS.items():
            arg = arg.replace(placeholder, value)
        assert not re.search(r"<[^>]+>", arg), (
            f"{arg}: an unknown placeholder; use {', '.join(PLACEHOLDERS)} or add it to "
            "PLACEHOLDERS in tests/house/test_docs.py")
        filled.append(arg)
    return filled


def read_paths(args: list[str]) -> list[str]:
    """The paths under outputs/ that the arguments read (not the run dirs they write)."""
    paths = []
    for arg in args:
        key, _, value = arg.partition("=")
        if not value:
            key, value = "", key
        if key.lstrip("+") in WRITTEN_KEYS:
            continue
        paths += [v for v in re.split(r"[,\[\]'\"]", value) if v.startswith("outputs/")]
    return paths


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """A local hub cache with the checkpoints the how-to pages name (hub_cache.DOCUMENTED)."""
    root = tmp_path_factory.mktemp("hub")
    return documented_cache(root / "cache", root / "work")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Two tiny checkpoints as transformers saves them: a pretraining BERT (MLM and NSP
    heads) and a sentence classifier, with one tokenizer."""
    import transformers

    tokenizer = tiny_tokenizer()
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128)
    made = {}
    for kind, cls in (("pretraining", transformers.BertForPreTraining),
                      ("classification", transformers.BertForSequenceClassification)):
        path = tmp_path_factory.mktemp(kind)
        cls(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        made[kind] = path
    return made


def own_files(args: list[str], folder: Path) -> None:
    """The user's own task files and findings folder a command names (relative: from the
    working dir), written in their format (tests/helpers/own_data_files.py), as a reader would have
    them."""
    tagging = "task=own_tagging" in args
    for arg in args:
        key, _, value = arg.partition("=")
        if key in ("task.train_file", "task.eval_file") and value not in ("", "null"):
            write_example(folder / value, tagging)
        if key == "findings_dir":  # a folder of the reader's findings, one of the survey's
            (folder / value).mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / "findings" / "pos_layers.yaml", folder / value)


def scratch(tmp_path: Path, args: list[str], checkpoints: dict[str, Path]) -> Path:
    """A dir to check the command from, holding outputs/, what its outputs/ paths name and
    the user's own data files it reads."""
    own_files(args, tmp_path)
    (tmp_path / "outputs").mkdir()
    for name in read_paths(args):
        path = tmp_path / name
        if path.name == "model" or re.fullmatch(r"step_\d+", path.name):
            kind = "pretraining" if name.startswith("outputs/pretrain/") else "classification"
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.symlink_to(checkpoints[kind], target_is_directory=True)
        else:
            path.mkdir(parents=True, exist_ok=True)
    return tmp_path


def check_command(args: list[str]) -> None:
    """What `bertology` checks before it runs: raises UserError on a refused config."""
    if not args or args[0] in ("-h", "--help", "help"):
        assert "usage: bertology" in format_usage()
        return
    pipeline, rest = args[0], args[1:]
    if pipeline == "data":  # a dry path: the verb and the set names, nothing fetched
        from bertology.cli.data_command import chosen, parse_args

        parsed = parse_args(rest)
        assert parsed.verb in ("list", "fetch", "verify"), rest
        chosen(getattr(parsed, "names", []) or [])
        return
    if pipeline == "runs":  # reads run dirs, writes none: its arguments and the dirs
        from bertology.cli.runs_command import build_parser

        parsed = build_parser().parse_args(rest)
        missing = [str(d) for d in parsed.dirs if not d.is_dir()]
        assert not missing, f"bertology runs: {missing} are not dirs"
        return
    if pipeline == "completion":  # the shell script: tests/house/test_help.py runs it
        return
    if pipeline == "convert":  # folders or hub ids, converted for real in test_convert.py
        assert rest and not any(arg.startswith("-") for arg in rest), rest
        return
    if "--help" in rest or "-h" in rest:
        assert pipeline in pipeline_names(), pipeline
        return
    if VERBS[pipeline].dirs_key is not None:
        rest = dirs_overrides(rest, VERBS[pipeline].dirs_key)
    flags = [arg for arg in rest if arg.startswith("-")]
    if flags:  # a sweep: every job, as Hydra's sweeper would launch them (cli.main)
        assert set(flags) <= SWEEP_FLAGS, f"{flags}: check this flag's command by hand"
        check_sweep(pipeline, [arg for arg in rest if arg not in flags],
                    load_config_check(pipeline))
        return
    precheck(pipeline, rest)


def documented_commands() -> list[tuple[str, list[str], str | None]]:
    return [(page.relative_to(REPO).as_posix(), args, error)
            for page in COMMAND_PAGES for args, error in commands_in(page.read_text())]


def test_the_pages_show_commands():
    pages = {page for page, _, _ in documented_commands()}
    assert {"README.md", "docs/pipelines.md", "docs/probing.md", "docs/usage.md"} <= pages


@pytest.mark.parametrize("page,args,error", fast_sample(
    documented_commands(), 6, ids=[f"{p}:{' '.join(a)[:60]}" for p, a, _ in documented_commands()]))
def test_every_command_composes(page, args, error, tmp_path, monkeypatch, checkpoints, hub):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))  # the hub checkpoints the pages name
    args = fill(args)
    monkeypatch.chdir(scratch(tmp_path, args, checkpoints))
    if error is None:
        try:
            check_command(args)
        except UserError as err:
            pytest.fail(f"{page}: `bertology {' '.join(args)}` is refused: {err}")
        return
    pipeline = args[0]
    with pytest.raises(UserError) as refused:
        check_command(args)
    assert f"bertology {pipeline}: error: {refused.value}" == error


def test_the_checks_catch_what_they_are_for(tmp_path, monkeypatch):
    """A misspelt key, one bad combination of a sweep and a link to a missing heading are
    found (the checks above would pass vacuously otherwise)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="max_step"):
        check_command(["pretrain", "+trainer.max_step=5"])
    with pytest.raises(UserError, match="max_steps=0"):
        check_command(["pretrain", "-m", "trainer.max_steps=5,0"])
    check_command(["pretrain", "objective.keep_ratio=0.1"])  # 0.8 + 0.1 + 0.1
    with pytest.raises(UserError, match="= 1.1"):  # only the experiment's mask100 arm: 1 + 0.1
        check_command(["pretrain", "-m", "experiment=pretrain_table8", "objective.keep_ratio=0.1"])
    assert broken_link(REPO / "README.md", "docs/usage.md#no-such-heading")
    assert broken_link(REPO / "README.md", "docs/no_such_page.md")
    assert broken_link(REPO / "README.md", "docs/usage.md#sweeps") is None
    found = commands_in("```bash\nbertology pretrain seed=1   # a comment\n"
                        "$ bertology distill kd.alpha=2\nbertology distill: error: x\n```\n")
    assert found == [(["pretrain", "seed=1"], None),
                     (["distill", "kd.alpha=2"], "bertology distill: error: x")]


def config_table(text: str) -> dict[str, str]:
    """docs/usage.md's config table: group -> its options cell."""
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    return {row[0].strip("| `"): row[1] for row in rows if len(row) > 2}


NOT_LISTED = {"findings", "hydra", "wandb_sweep"}  # the study's catalogue, Hydra's, W&B's


def test_the_config_table_lists_every_option_of_every_group():
    """Issue 42: docs/usage.md listed 4 of 6 models and missed 6 groups. Every conf/ group is
    a row and every option of it appears in its cell (experiments by their prefix glob)."""
    table = config_table((REPO / "docs" / "usage.md").read_text())
    groups = {p.name for p in (REPO / "conf").iterdir() if p.is_dir()} - NOT_LISTED
    assert groups <= set(table), sorted(groups - set(table))
    for group in groups:
        cell = table[group]
        globs = [g.strip("`") for g in cell.split(", ") if g.strip("`").endswith("*")]
        for option in sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")):
            listed = f"`{option}`" in cell or any(option.startswith(g[:-1]) for g in globs)
            assert listed, f"docs/usage.md: {group}={option} is not in the config table"


def test_help_names_every_family():
    """`bertology --help` names every model family the pipelines take."""
    from bertology.families import FAMILIES

    usage = format_usage()
    assert all(name in usage for name in FAMILIES), [n for n in FAMILIES if n not in usage]


def test_the_front_page_quotes_the_default_runs_measured_numbers():
    """Issue 42: the default run was 84 s in the README, 44.7 s in docs/pipelines.md and "about
    45 s" in a config comment, NSP 0.84 or 0.891. docs/default_runs.md (make default-runs)
    is the one source: the README's first-run paragraph quotes its pretrain row, to 3 digits."""
    rows = [line for line in (REPO / "docs" / "default_runs.md").read_text().splitlines()
            if line.startswith("| `bertology pretrain`")]
    assert len(rows) == 1, "docs/default_runs.md has no pretrain row: run make default-runs"
    _, seconds, metrics = (cell.strip() for cell in rows[0].strip("|").split("|"))
    readme = (REPO / "README.md").read_text()
    paragraph = readme[readme.index("Held-out MLM accuracy"):].split("\n\n")[0]
    quoted = [float(x) for x in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", metrics)]
    assert quoted, metrics
    for value in quoted:
        assert f"{value:.3g}" in paragraph, (value, paragraph)
    assert f"took {seconds}" in paragraph.replace("\n", " ")
    for doc in ("docs/pipelines.md", "docs/probing.md", "conf/trainer/default.yaml",
                "conf/probe.yaml"):
        assert "default_runs.md" in (REPO / doc).read_text(), doc


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_the_reference_pages_are_the_codes_own(name):
    """docs/reference/ is written by `make reference` from the catalogue, the config dataclasses
    and the CLI's help: a page edited by hand, or code changed without it, fails here."""
    page = REPO / "docs" / "reference" / name
    assert page.read_text(encoding="utf-8") == reference.PAGES[name](), (
        f"docs/reference/{name} is stale: run make reference")


def test_the_reference_pages_are_linked():
    assert len(REFERENCE_PAGES) == len(reference.PAGES)
    assert {p.resolve() for p in REFERENCE_PAGES} <= linked_from(FRONT_PAGES)


def test_the_results_pages_are_the_published_runs_files():
    """docs/results.md and the README's blocks are what study/publish renders from the files
    under docs/results/ (`make results` copied them from a run's report): no number on them is
    typed by hand, and the README's one-checkpoint block is filled."""
    docs = REPO / "docs"
    assert (docs / "results.md").read_text() == render_results_page(docs)
    readme = (REPO / "README.md").read_text()
    runs = published(docs)
    assert "minilm" in runs, "no make reproduce run published: make results REPORT=<out>/report"
    for name, folder in runs.items():
        begin, end = block_markers(name)
        assert f"{begin}\n{readme_block(folder)}{end}" in readme, f"README's {name} block"


DECIMAL = re.compile(r"(?<![\w.])[+−-]?\d+\.\d+(?![\w.])")


def rounds_to(value: str, numbers: set[str]) -> bool:
    """Whether value is one of the numbers, or one of them rounded to value's digits."""
    digits = len(value.split(".")[1])
    target = float(value.replace("−", "-"))
    return any(abs(round(float(n.replace("−", "-")), digits) - target) < 10 ** -(digits + 3)
               for n in numbers)


def test_every_number_on_the_front_page_is_on_the_page_it_cites():
    """A measured number on the README is typed once: outside the generated results blocks,
    each decimal number of a paragraph appears (or rounds from one that appears) on a page
    that paragraph links to, where the run or table that produced it is recorded."""
    text = (REPO / "README.md").read_text()
    text = re.sub(r"<!-- results:(\w+).*?<!-- /results:\1 -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    untied = []
    for paragraph in text.split("\n\n"):
        numbers = {n.lstrip("+−-") for n in DECIMAL.findall(paragraph)}
        pages = [REPO / t.split("#")[0] for t in LINK.findall(paragraph)
                 if not t.startswith("http") and t.split("#")[0].endswith(".md")]
        cited = {n for page in pages if page.is_file() for n in DECIMAL.findall(page.read_text())}
        cited = {n.lstrip("+−-") for n in cited}
        untied += [f"{n} ({paragraph[:60]!r}...)" for n in sorted(numbers)
                   if not rounds_to(n, cited)]
    assert not untied, "numbers no linked page records: " + "; ".join(untied)
