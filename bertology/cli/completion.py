"""Bash completion: `eval "$(bertology completion bash)"` (in ~/.bashrc) completes the verbs
(config/verbs.py's rows), a command's own words (its row's `complete`), a pipeline's config
groups and their options (sweep lists too: model=bert,ro<TAB>), keys one level at a time
(trainer.<TAB>) and flags. Hydra's own `--shell-completion` knows one app, not the pipeline
word in front of it, so the script asks `bertology completion query LINE` instead.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from bertology.config.compose import CONF_DIR
from bertology.config.options import EXPERIMENT, group_options, pipeline_groups
from bertology.config.rows import load_function
from bertology.config.verbs import VERBS
from bertology.errors import UserError

FLAGS = ("-m", "--multirun", "--help", "--cfg", "--hydra-help", "--info")

BASH_SCRIPT = r"""# bertology bash completion; load it with: eval "$(bertology completion bash)"
_bertology_complete() {
    local line="${COMP_LINE:0:$COMP_POINT}"
    local cur="${COMP_WORDS[COMP_CWORD]}"
    # bash splits words at '=' and ':' (COMP_WORDBREAKS); the candidates are whole tokens,
    # so the part of the token before bash's current word is taken off each
    local token="${line##*[[:space:]]}"
    local prefix="${token%"$cur"}"
    local IFS=$'\n'
    local candidates=($("${COMP_WORDS[0]}" completion query "$line" 2>/dev/null))
    COMPREPLY=()
    local candidate
    for candidate in "${candidates[@]}"; do
        COMPREPLY+=("${candidate#"$prefix"}")
        case "$candidate" in *= | *. | *,) compopt -o nospace 2>/dev/null ;; esac
    done
}
complete -o default -F _bertology_complete bertology
"""


def query(line: str) -> list[str]:
    """Candidates for the last word of a command line typed so far (`bertology pretrain mo`):
    verbs from config/verbs.py's rows, then a pipeline's groups and keys or a command's own."""
    words = line.split()
    if not line or line[-1].isspace():
        words.append("")
    if len(words) <= 1:
        return []
    current = words[-1]
    if len(words) == 2:
        return _starting(current, [*VERBS, "--help"])
    verb = VERBS.get(words[1])
    if verb is None:
        return []
    if verb.check is not None:
        return pipeline_candidates(words[1], current, words[2:-1])
    if verb.complete is None:  # bash's `-o default` completes paths
        return []
    return _starting(current, load_function(verb.complete)(current, words[2:-1]))


def pipeline_candidates(pipeline: str, current: str, before: list[str]) -> list[str]:
    if current.startswith("-"):
        return _starting(current, FLAGS)
    groups = pipeline_groups(pipeline)
    if "=" in current:
        key, value = current.split("=", 1)
        group = key.lstrip("+~")
        if group not in groups:
            return []
        done, _, last = value.rpartition(",")  # a sweep list: complete its last entry
        head = f"{key}={done}," if done else f"{key}="
        return [head + option for option in group_options(group) if option.startswith(last)]
    if "." in current:
        return key_candidates(pipeline, current, before)
    top = [f"{group}=" for group in groups]
    top += [f"{key}." if isinstance(value, dict) else f"{key}="
            for key, value in _top_level(pipeline).items()]
    top += [f"{group}." for group in groups if "/" not in group and group != EXPERIMENT]
    return _starting(current, sorted(set(top)))


def key_candidates(pipeline: str, current: str, before: list[str]) -> list[str]:
    """The keys one level under the typed parent, in the config the line's group choices
    compose (model=electra adds model.generator_fraction): inner nodes end in '.',
    values in '='."""
    from bertology.cli.suggest import candidate_keys

    parent = current.rpartition(".")[0]
    choices = [w for w in before if "=" in w and not w.startswith("-")
               and w.split("=", 1)[0].lstrip("+~") in pipeline_groups(pipeline)]
    keys = candidate_keys(pipeline, choices)
    inner = {k.rpartition(".")[0] for k in keys}
    children = [k for k in keys if k.rpartition(".")[0] == parent]
    return _starting(current, [f"{k}." if k in inner else f"{k}=" for k in children])


def _top_level(pipeline: str) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{pipeline}.yaml"))
    return {k: v for k, v in node.items() if k not in ("defaults", "hydra")}


def _starting(prefix: str, candidates) -> list[str]:
    return [c for c in candidates if c.startswith(prefix)]


def complete_shells(current: str, args: list[str]) -> list[str]:
    """`bertology completion <TAB>`: the shells it writes a script for."""
    return [] if args else ["bash"]


def main(args: list[str]) -> int:
    """`bertology completion bash` prints the script; `bertology completion query LINE` one
    candidate a line."""
    if args[:1] == ["bash"]:
        print(BASH_SCRIPT)
    elif args[:1] == ["query"]:
        print("\n".join(query(" ".join(args[1:2]))))
    else:
        raise UserError("completion: use `bertology completion bash` (then "
                        "eval \"$(bertology completion bash)\", e.g. in ~/.bashrc)")
    return 0
