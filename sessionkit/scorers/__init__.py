"""Scorers for ``store.score``: functions that label messages, turns, paths or sessions
(docs/judging.md).

>>> import sessionkit as sk
>>> store.score(sk.scorers.tool_error)                        # code: a tool call failed
>>> judge = sk.scorers.llm_judge("Does the reply answer the question?",
...                              model="gpt-4o-mini", tags=["answers", "evades"])
>>> store.score(judge, where="NOT regenerated")               # a model as judge

A scorer is any callable taking one :class:`Unit` and answering a tag, a
:class:`~sessionkit.Score` or None; :func:`scorer` gives it a name and a version.
"""

from __future__ import annotations

from ..store import SCORE_LEVELS as LEVELS
from ..store import Score, Unit, scorer
from ._code import REFUSAL_PHRASES, empty_reply, refusal, refusal_keywords, regenerated, tool_error
from ._judge import LLMJudge, llm_judge

__all__ = [
    "LEVELS",
    "LLMJudge",
    "REFUSAL_PHRASES",
    "Score",
    "Unit",
    "empty_reply",
    "llm_judge",
    "refusal",
    "refusal_keywords",
    "regenerated",
    "scorer",
    "tool_error",
]
