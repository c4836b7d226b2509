"""The numbers every view formats twice: in Python for the static snapshots (sessionkit/widgets/
_static.py fmt_tokens, fmt_cost, plural) and in JavaScript for the live views (static/common.js
skTokens, skCost, skPlural). The JavaScript runs under node on the same table of values, and
both must say the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sessionkit.widgets import _static

COMMON = Path(_static.__file__).parent / "static" / "common.js"

TOKENS = [0, 1, 12, 999, 1000, 1049, 1050, 1250, 1500, 9999, 9950, 10_000, 12_500, 15_000, 999_499, 999_999]
TOKENS += [1_000_000, 1_250_000, 1_500_000, 12_345_678, 2**40, -1, -1500, -12_500, 999.9, 1500.7, None]
COSTS = [0, 0.0, 1e-9, 0.00001, 0.00005, 0.00015, 0.03125, 0.0001, 0.1234, 0.5, 0.99999, 0.999949]
COSTS += [1, 1.005, 1.5, 2.125, 12.345, 1234.5, 1e6, 123_456_789.125, -0.5, None]
# (cost, unknown, total): a partial sum, every one unknown, no count of the total
PARTIAL = [(0.0001, 2, 3), (0.5, 3, 3), (0.0, 3, 3), (0.0, 0, 2), (0, 2, None), (0.5, 2, None), (None, 0, 3)]
PARTIAL += [(1.5, 1, 10), (2.125, 0, 4), (0.03125, 1, None)]
COUNTS = [0, 1, 2, 999, 1000, 1234, 1_000_000, 1_234_567, -1, -1234]

# common.js is a classic script: its functions become the context's globals. Each case is
# [function, args]; a null argument is also tried as undefined (a field the payload lacks).
_RUNNER = r"""
const fs = require("fs");
const vm = require("vm");
const context = vm.createContext({});
vm.runInContext(fs.readFileSync(process.argv[1], "utf8"), context);
const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const out = cases.map(([name, args]) => {
  const fn = context[name];
  const asNull = fn(...args);
  const asUndefined = fn(...args.map((a) => (a === null ? undefined : a)));
  return [asNull, asUndefined];
});
process.stdout.write(JSON.stringify(out));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed (.ci/run installs it)")
        pytest.skip("node is not installed")
    return node


def _python(name: str, args: list) -> str:
    if name == "skTokens":
        return _static.fmt_tokens(*args)
    if name == "skCost":
        cost, unknown, total = (args + [0, None])[:3]
        return _static.fmt_cost(cost, unknown=unknown or 0, total=total)
    return _static.plural(*args)


def test_the_javascript_and_the_python_format_every_value_alike():
    cases = [["skTokens", [n]] for n in TOKENS]
    cases += [["skCost", [c]] for c in COSTS]
    cases += [["skCost", list(p)] for p in PARTIAL]
    cases += [["skPlural", [n, "leaf", "leaves"]] for n in COUNTS]
    cases += [["skPlural", [n, "message"]] for n in COUNTS]
    done = subprocess.run(
        [_node(), "-e", _RUNNER, str(COMMON)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(done.stdout)
    assert len(got) == len(cases)
    wrong = []
    for (name, args), (as_null, as_undefined) in zip(cases, got):
        expected = _python(name, args)
        if as_null != expected or as_undefined != expected:
            wrong.append(f"{name}{tuple(args)}: Python {expected!r}, JavaScript {as_null!r} / {as_undefined!r}")
    assert not wrong, "\n".join(wrong)


def test_the_table_holds_the_edges():
    """Ties of each rounding, both sides of each threshold, fractions and a missing value."""
    assert _static.fmt_tokens(1250) == "1.3k" and _static.fmt_tokens(12_500) == "13k"
    assert _static.fmt_tokens(999.9) == "999" and _static.fmt_tokens(None) == "?"
    assert _static.fmt_cost(0.03125) == "$0.0313" and _static.fmt_cost(2.125) == "$2.13"
    assert _static.fmt_cost(1.005) == "$1.00"  # 1.005 is 1.00499999... as a float
