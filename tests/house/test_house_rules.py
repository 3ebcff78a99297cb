"""The house rules that are not the floor plan (tests/house/test_layout.py has that): the code says
why, not when or where it was measured; a public name means one thing; one reader of run dirs;
the training loop's helpers take few loose parameters (the docs pages' own rules, their size and
no history in the manual, are in tests/house/test_docs.py). Each rule is a checker function run
on bertology/, and on a planted violation, so a checker that stopped finding anything would fail
here too."""

from __future__ import annotations

import ast
import io
import re
import tokenize

import pytest
from conftest import REPO

PACKAGE = REPO / "bertology"


def sources() -> dict[str, str]:
    """bertology/'s modules by path (relative to the repository), with their text."""
    return {str(p.relative_to(REPO)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def docstring_nodes(tree: ast.AST) -> list[ast.Constant]:
    return [node.body[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)]


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of a module's docstrings and comments: what the code says about itself."""
    comments = [(t.start[0], t.string) for t in
                tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT]
    docstrings = [(node.lineno, node.value) for node in docstring_nodes(ast.parse(source))]
    return sorted(comments + docstrings)


# ---------------------------------------------------------------- no history in the code

# What was measured, on which machine, when, and under which issue is history: it goes stale the
# day it is written, and it belongs in docs/ or bench/RESULTS.md, which say when and where. The
# code says why. A paper's year, "(Devlin et al., 2019)", is a citation, not history; so is a
# date inside a path (Hydra names its run dirs by date) and a number that is all digits.
DURATION = r"\d[\d.,]*\s?(?:ns|µs|us|ms|s|sec|seconds?|mins?|minutes?|hours?)\b(?!\.d\.)"
HISTORY = {
    "an issue number": re.compile(r"\b(?:issues?|PR|pull request)\s*#?\d+|\(#\d+\)", re.I),
    # 7 to 40 hex digits, at least one digit and one letter (not 1e10000): a git SHA
    "a commit hash": re.compile(r"(?<![\w.-])(?!\d+e\d+\b)(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])"
                                r"[0-9a-f]{7,40}(?![\w-])"),
    "a date": re.compile(r"(?<![\w/])(?:19|20)\d\d-[01]\d-[0-3]\d(?![\w/])"),
    "a machine": re.compile(r"\b(?:EPYC|Xeon|Ryzen|Threadripper)\b"
                            r"|\b(?:this|our|my) (?:machine|box|host|laptop|server)\b", re.I),
    # a duration as measured (~, about) or measured somewhere (N s on the ...), a speed-up on
    # some hardware (N x faster than fp32 on ...)
    "a timing": re.compile(rf"(?:~|≈|\babout |\baround |\broughly ){DURATION}"
                           rf"|{DURATION}[^.;:]{{0,40}}?\bon (?:the|a|an|this|one|\d+)\b"
                           r"|\b\d[\d.]*x (?:faster|slower|fewer|more|less)\b[^.;]{0,60}?\bon\b",
                           re.I),
}


def history_in(source: str) -> list[str]:
    """'line: what: the words' for each piece of history in a module's docstrings and comments."""
    return [f"{line}: {what}: {found.group(0)!r}" for line, text in prose(source)
            for what, pattern in HISTORY.items() for found in pattern.finditer(text)]


def test_no_history_in_the_code():
    found = [f"{path}:{hit}" for path, text in sources().items() for hit in history_in(text)]
    assert not found, ("history in docstrings and comments (move it to docs/ or "
                       "bench/RESULTS.md; say why, not when or where):\n" + "\n".join(found))


# each kind of history, planted (test_each_checker_finds_what_is_planted)
PLANTED_HISTORY = [
    '"""Inputs longer than the model can read (issue 41)."""\n',
    "x = 1  # see Issue #42 for the cut\n",
    "x = 1  # refused since (#17)\n",
    'def f():\n    """Reads the floor, as ceb2259 wrote it."""\n',
    "# judged again at 84984ca0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6\n",
    '"""The default run, as of 2026-11-29."""\n',
    'class A:\n    """bernoulli_ is 9.7% of a step on the Xeon."""\n',
    "x = 1  # 3 lanes fit on an AMD EPYC\n",
    "x = 1  # fast enough on this machine\n",
    'def f():\n    """Hashes the weights: about 0.2 s for MiniLM."""\n',
    "x = 1  # remembered: ~0.1 ms a call\n",
    "x = 1  # measured 4.2 s on the AMD, alone\n",
    '"""int8 runs ~1.5x faster than fp32 on an AVX2 CPU."""\n',
    '"""14x fewer random-number cycles, measured\non 2 cores."""\n',
]
NOT_HISTORY = ('"""Masked LM (Devlin et al., 2019, §3.1 Task #1): a band of ±1 s.d. over seeds;\n'
               "durations print as 1h 02m / 3m 05s / 42s, into multirun/2026-11-22/10-00-00.\n"
               '"""\n'
               "SEED = 20191107  # a date-like seed: all digits, no commit\n"
               "EPS = 1e10000  # added to a decade of facade, no hash\n"
               "x = 1  # a quarter of the draws, so the step spends less on them\n")


# ---------------------------------------------------------------- one reader of run dirs

# A run's files are named in run/ (rundir.py: METRICS_FILE, HYDRA_DIR) and read through RunDir;
# a module that spells them itself reads run dirs beside RunDir and drifts from it.
RUN_FILES = ("metrics.json", ".hydra")
# the modules that spell a run file themselves, each with its reason above it
SPELLS_RUN_FILES = {
    # config/ sits below run/ (LAYERS in tests/house/test_layout.py): it checks a fine-tuned twin's
    # recorded config (<model dir>/../.hydra/config.yaml) before any run starts, so it cannot
    # import RunDir or its constants
    "bertology/config/twin_checks.py",
}


def run_file_literals(source: str) -> list[str]:
    """'line: literal' for each string in the code (docstrings aside) naming a run file as a
    path part: "metrics.json", ".hydra/config.yaml"; not prose that mentions one."""
    tree = ast.parse(source)
    docstrings = {id(node) for node in docstring_nodes(tree)}
    return [f"{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            and any(part in RUN_FILES for part in node.value.split("/"))]


def test_run_files_are_named_in_run_only():
    texts = sources()
    found = [f"{path}:{hit}" for path, text in texts.items()
             if not path.startswith("bertology/run/") and path not in SPELLS_RUN_FILES
             for hit in run_file_literals(text)]
    assert not found, ("run files spelt outside run/ (read through RunDir, or name "
                       "rundir.METRICS_FILE / HYDRA_DIR):\n" + "\n".join(found))
    stale = [path for path in SPELLS_RUN_FILES if not run_file_literals(texts[path])]
    assert not stale, f"these no longer spell a run file; drop them from SPELLS_RUN_FILES: {stale}"


# run files spelt by hand, planted (test_each_checker_finds_what_is_planted)
PLANTED_RUN_FILES = [
    'metrics = json.loads((run_dir / "metrics.json").read_text())\n',
    'record = run_dir / ".hydra" / "config.yaml"\n',
    'record = f"{run_dir}/.hydra/overrides.yaml"\n',
    'done = [p for p in root.rglob("metrics.json")]\n',
]
NOT_RUN_FILES = ('"""Reads metrics.json and .hydra/config.yaml through RunDir."""\n'
                 'log.info("each such sentence counted in metrics.json: data/split_long")\n'
                 'status = "damaged (no metrics.json)"\n'
                 'log_path = run_dir / "metrics.jsonl"\n'
                 "done = (run_dir / METRICS_FILE).is_file()\n")


# ---------------------------------------------------------------- a public name means one thing

# Names defined in several modules on purpose: each module's instance of one protocol, which a
# caller reaches through the module.
SHARED_NAMES = {
    "run",  # a pipeline's or an analysis's entry: config/verbs.py's and analysis_settings.py's rows
    "main",  # a command's entry (a row of config/verbs.py) or a `python -m` module's
    "build",  # an objective module's constructor (objectives.OBJECTIVES for pretraining)
    "log",  # the module's own logger, logging.getLogger(__name__)
}


def public_names(source: str) -> set[str]:
    """The names a module defines at its top level (functions, classes, constants, type
    aliases), less the private ones (_name) and what it imports."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return {name for name in names if not name.startswith("_")}


def names_defined_twice(texts: dict[str, str]) -> dict[str, list[str]]:
    """name -> the modules that define it, for each public name defined in more than one."""
    where: dict[str, list[str]] = {}
    for path, text in texts.items():
        for name in public_names(text):
            where.setdefault(name, []).append(path)
    return {name: paths for name, paths in sorted(where.items()) if len(paths) > 1}


def test_a_public_name_means_one_thing():
    twice = names_defined_twice(sources())
    found = {name: paths for name, paths in twice.items() if name not in SHARED_NAMES}
    assert not found, ("one name, several things (rename, or import the one definition):\n"
                       + "\n".join(f"{name}: {', '.join(paths)}" for name, paths in found.items()))
    unused = SHARED_NAMES - set(twice)
    assert not unused, f"no longer shared; take them off SHARED_NAMES: {sorted(unused)}"


def test_a_name_defined_twice_is_found():
    planted = {"a.py": "def describe(x):\n    return x\n\nREPLICATES = 400\n_cache = {}\n",
               "b.py": "from a import describe\n\nREPLICATES: dict = {}\n_cache = {}\n",
               "c.py": "class describe:\n    pass\n"}
    assert names_defined_twice(planted) == {"REPLICATES": ["a.py", "b.py"],
                                            "describe": ["a.py", "c.py"]}


# ---------------------------------------------------------------- few loose parameters in the loop

# A function in training/ takes at most MAX_LOOSE parameters: what travels together is a record
# named once (TrainJob, TrainOutput, the Loop, a checkpoint's Snapshot), not seven positional
# arguments kept in step at every call. Every named parameter counts, defaulted or not,
# positional or keyword-only; self and cls do not, nor *args and **kwargs (passed through
# unread). A dataclass's fields are a record's, not a function's parameters.
MAX_LOOSE = 4
LOOSE_PARAMETER_ROOMS = ("bertology/training/",)
# signatures fixed outside bertology, each with its reason
FIXED_SIGNATURES = {
    # transformers' AttentionInterface calls it as it calls its own SDPA function
    "bertology/training/dropout.py:bits_attention",
}


def loose_parameters(source: str) -> list[str]:
    """'name: N parameters, line L' for each function or lambda of the module taking more
    than MAX_LOOSE named parameters (self and cls aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if names[:1] in (["self"], ["cls"]):
                names = names[1:]
            if len(names) > MAX_LOOSE:
                name = getattr(node, "name", "lambda")
                found.append(f"{name}: {len(names)} parameters, line {node.lineno}")
    return found


def test_the_loops_helpers_take_few_loose_parameters():
    texts = {path: text for path, text in sources().items()
             if path.startswith(LOOSE_PARAMETER_ROOMS)}
    hits = {f"{path}:{hit.split(':')[0]}": hit for path, text in texts.items()
            for hit in loose_parameters(text)}
    found = [f"{where} ({hit.split(': ', 1)[1]})" for where, hit in hits.items()
             if where not in FIXED_SIGNATURES]
    assert not found, (f"more than {MAX_LOOSE} loose parameters (hold them in a record, or a "
                       "method of the record that holds them):\n" + "\n".join(found))
    stale = sorted(FIXED_SIGNATURES - set(hits))
    assert not stale, f"these take few parameters now; drop them from FIXED_SIGNATURES: {stale}"


# more than four loose parameters, planted (test_each_checker_finds_what_is_planted)
PLANTED_LOOSE = [
    "def save(out_dir, state, model, optimizer, cfg):\n    pass\n",
    "class Loop:\n    def step(self, a, b, c, d, *, accelerator=None):\n        pass\n",
    "def f(a, /, b, c, d, e=1):\n    pass\n",
    "hook = lambda a, b, c, d, e: a\n",
]
NOT_LOOSE = ("def f(a, b, c, d, *args, **kwargs):\n    pass\n\n\n"
             "class A:\n    def g(self, a, b, c, d):\n        pass\n\n"
             "    @classmethod\n    def h(cls, a, b, c, d=None):\n        pass\n\n\n"
             "@dataclass\nclass Job:\n    a: int\n    b: int\n    c: int\n    d: int\n"
             "    e: int = 0\n")


# ---------------------------------------------------------------- the checkers find what they must


@pytest.mark.parametrize("checker, planted", [*((history_in, p) for p in PLANTED_HISTORY),
                                              *((run_file_literals, p) for p in PLANTED_RUN_FILES),
                                              *((loose_parameters, p) for p in PLANTED_LOOSE)])
def test_each_checker_finds_what_is_planted(checker, planted):
    assert checker(planted), planted


@pytest.mark.parametrize("checker, allowed", [(history_in, NOT_HISTORY),
                                              (run_file_literals, NOT_RUN_FILES),
                                              (loose_parameters, NOT_LOOSE)])
def test_each_checker_passes_what_is_allowed(checker, allowed):
    assert checker(allowed) == []
