"""The exceptions the CLI turns into one line and an exit status (DESIGN §4).

UserError    bad input (a config value, a data file, a checkpoint): exit 2, and a fresh run
             dir is removed, so nothing is left that could pass for a run
RunFailed    the run itself went wrong (a non-finite loss, a failed write): exit 1, the run dir
             and its checkpoints are kept and marked failed
Interrupted  SIGTERM (how SLURM preempts) or Ctrl-C: a checkpoint was written; exit 143
             (128 + 15) or 130 (128 + 2), and a rerun into the same dir resumes. Under submitit
             a preemption requeues the job instead, which resumes from that checkpoint
"""


class UserError(Exception):
    """Bad input. The message names the problem and the fix; shown without a traceback."""


class RunFailed(Exception):
    """A run that cannot go on; its checkpoints stay, its status says failed."""


class Interrupted(Exception):
    """Stopped by a signal after writing a checkpoint. `handover`: submitit's preemption
    handler, which requeues the job; the CLI calls it once the run's status is written."""

    def __init__(self, message: str, handover=None, signum: int = 15):
        super().__init__(message)
        self.handover = handover
        self.exit_status = EXIT_CTRL_C if signum == 2 else EXIT_INTERRUPTED  # 2: SIGINT


EXIT_USER_ERROR = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 143  # the shell's code for a process ended by SIGTERM (128 + 15)
EXIT_CTRL_C = 130  # and by SIGINT (128 + 2)


def require(condition: bool, message: str) -> None:
    """Raise UserError(message) unless condition holds."""
    if not condition:
        raise UserError(message)
