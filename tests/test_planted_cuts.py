"""The planted cuts (`tests/planted_cuts.py`) still apply to the source: when code moves, a cut whose text is gone
would otherwise go unnoticed until the slow script runs."""

from __future__ import annotations

from pathlib import Path

from planted_cuts import (
    CUTS,
    EXTRA_CUTS,
    PATH_CUTS,
    PROMISE_CUTS,
    STEP_CUTS,
    WASTE_CUTS,
    planted_cuts,
    stale_cuts,
    wiring_cuts,
)


def test_every_planted_cut_applies_to_the_source_and_leaves_it_parsing() -> None:
    assert set(WASTE_CUTS) | set(STEP_CUTS) | set(PATH_CUTS) | set(EXTRA_CUTS) <= set(CUTS)  # those of CUTS' switches
    assert not set(PROMISE_CUTS) & set(CUTS)  # an extension is named apart from the switches
    cuts = planted_cuts([*CUTS, *PROMISE_CUTS])
    assert len(cuts) == (len(CUTS) + len(WASTE_CUTS) + len(STEP_CUTS) + sum(map(len, PATH_CUTS.values()))
                         + len(EXTRA_CUTS) + len(wiring_cuts()) + sum(map(len, PROMISE_CUTS.values())))
    assert stale_cuts(cuts) == []


def test_a_cut_that_no_longer_applies_is_named_with_why(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "compile.py").write_text('def hot(fn, perf):\n    if perf.compile == "off":\n'
                                                 "        return fn\n    return fn\n")
    stale = [("compile", "moved text", [("core/compile.py", "if perf.compile is None:", "if True:")]),
             ("compile", "moved file", [("compile.py", 'if perf.compile == "off":', "if True:")]),
             ("compile", "no change", [("core/compile.py", "return fn", "return fn")]),
             ("compile", "broken", [("core/compile.py", 'if perf.compile == "off":', 'if perf.compile == "off"')]),
             ("compile", "second edit", [("core/compile.py", 'if perf.compile == "off":', "if True:"),
                                         ("core/compile.py", 'if perf.compile == "off":', "if False:")]),
             ("compile", "applies", [("core/compile.py", 'if perf.compile == "off":', "if True:")])]
    assert stale_cuts(stale, tmp_path) == [
        "compile (moved text): 'if perf.compile is None:' is not in core/compile.py any more",
        "compile (moved file): compile.py is not a file any more",
        "compile (no change): replacing 'return fn' changes nothing in core/compile.py",
        "compile (broken): the cut leaves core/compile.py unparsable (line 2: expected ':')",
        "compile (second edit): 'if perf.compile == \"off\":' is not in core/compile.py any more"]
