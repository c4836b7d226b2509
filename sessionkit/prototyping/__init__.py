"""What if? Running one prompt under several variants, and replaying conversations (docs/prototyping.md).

:func:`compare` runs the same prompt from the same message of a session under N
variants (another model, instructions, tools, temperature...), each a sibling
branch and a recorded run; :func:`replay` re-asks a stored conversation's user
turns with another agent, beside the original. Both return tables
(``.to_pandas()``) for reading the differences.
"""

from ._compare import COMPARISON_COLUMNS, Comparison, compare
from ._replay import REPLAY_COLUMNS, Replay, replay

__all__ = ["COMPARISON_COLUMNS", "REPLAY_COLUMNS", "Comparison", "Replay", "compare", "replay"]
