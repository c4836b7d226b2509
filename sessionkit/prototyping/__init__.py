"""What if? Running one prompt under several variants, replaying conversations, and
experiments over datasets (docs/prototyping.md).

:func:`compare` runs the same prompt from the same message of a session under N
variants (another model, instructions, tools, temperature...), each a sibling
branch and a recorded run; :func:`replay` re-asks a stored conversation's user
turns with another agent, beside the original; :func:`experiment` re-asks every
item of a dataset under each variant and scores the replies. All return tables
(``.to_pandas()``) for reading the differences.
"""

from ._compare import COMPARISON_COLUMNS, Comparison, compare
from ._experiment import EXPERIMENT_COLUMNS, Experiment, experiment
from ._replay import REPLAY_COLUMNS, Replay, replay

__all__ = [
    "COMPARISON_COLUMNS",
    "EXPERIMENT_COLUMNS",
    "REPLAY_COLUMNS",
    "Comparison",
    "Experiment",
    "Replay",
    "compare",
    "experiment",
    "replay",
]
