"""The README and docs/ stay true: every relative link resolves, every page is reachable from the README, and
every documented command is checked. `syncfree train` commands run for one iteration (compiling is off in the
suite), `eval`, `play`, `export`, `plot`, `tasks` and `switches` run on a small run trained here, which stands in for
`runs/<run>`; `tune`, `bench`, `doctor`, `torchrun` and commands naming the reader's own files are parsed with the
command's own parser (every option must exist and validate); benchmark scripts must exist and know their flags."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from syncfree import cli, doctor
from syncfree.bench.config import parse_arguments as parse_bench_arguments
from syncfree.train.arguments import parse_train_config
from syncfree.tuning import parse_arguments as parse_tune_arguments

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = ("my_", "my.", "HOST:", "/tmp/before")
DOCS_ENVS = 256  # the most envs a documented command trains with here
"""Commands naming the reader's own files or machines: their options are still parsed where that needs no file."""

pytestmark = pytest.mark.usefixtures("one_thread")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http://", "https://", "mailto:"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: {target} (anchors: {sorted(anchors(resolved))})"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert {p.resolve() for p in PAGES[1:]} <= linked
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200  # a front door, not the manual


def test_ci_runs_the_readmes_test_command() -> None:
    """The README's second command is the tests; CI (`.ci/run`) runs that very command, which installs what the
    suite needs (extras, the G1 clips), so a newcomer's run skips no more than CI's."""
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert first_block is not None
    test_command = shlex.split(first_block.group(1).splitlines()[1], comments=True)
    assert test_command == ["bash", "scripts/test"]
    ci_script = re.sub(r"\\\n\s*", " ", (ROOT / ".ci" / "run").read_text())  # continuation lines joined
    assert test_command in [shlex.split(line, comments=True) for line in ci_script.splitlines()]
    script = (ROOT / "scripts" / "test").read_text()
    assert "holosoma" in script and ".[test,bench,grid]" in script and "tests/with_mjlab" in script


def test_the_api_reference_is_current() -> None:
    """docs/api.md is what `scripts/api_reference.py` writes from today's docstrings and signatures."""
    import runpy

    script = runpy.run_path(str(ROOT / "scripts" / "api_reference.py"))
    assert script["main"](["--check"]) == 0, "run python scripts/api_reference.py"
    page = (ROOT / "docs" / "api.md").read_text()
    for name in ("syncfree.learn(", "syncfree.load(", "syncfree.evaluate(", "syncfree.check_env(", "eval_every"):
        assert name in page


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every line of the shell blocks, continuation lines joined, trailing comments cut."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(), flags=re.S):
            text = re.sub(r"\\\n\s*", " ", block)
            for line in text.splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    found.append((page.name, shlex.join(words)))
    return found


COMMANDS = documented_commands()


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A one-iteration pendulum run: what `runs/<run>` stands for in the commands."""
    log_dir = tmp_path_factory.mktemp("runs")
    assert cli.main(["train", "--task", "pendulum", "--iterations", "1", "--env.num_envs", "16",
                     "--perf.compile", "off", "--log.progress", "false", "--log.dir", str(log_dir),
                     "--log.run_name", "run"]) == 0
    return log_dir / "run"


def check(command: str, run: Path, tmp_path: Path, monkeypatch, capsys) -> str:
    """Run or parse one documented command; returns what was done (`ran`, `parsed`, `skipped: why`)."""
    words = [w.replace("runs/<run>", str(run)) for w in shlex.split(command)]
    if "&&" in words:  # setup, then the command itself
        setup, words = words[: words.index("&&")], words[words.index("&&") + 1:]
        assert setup[:2] == ["pip", "install"], setup
        check_install(shlex.join(setup))
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # environment settings before the command
        words = words[1:]
    if words[0].endswith("/pip"):  # a virtual environment's pip
        words = ["pip", *words[1:]]
    if words[:3] == ["python3", "-m", "venv"]:
        return "skipped: makes a virtual environment"
    command = shlex.join(words)
    if words[0] == "pip":
        check_install(command)
        return "checked the extras"
    if words[:3] == ["python", "-m", "pytest"] or words[:2] == ["bash", "scripts/test"]:
        return "skipped: the suite itself"
    if words[0] == "python":
        script = ROOT / words[1]
        assert script.is_file(), script
        source = script.read_text()
        for flag in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert f'"{flag}"' in source or f"'{flag}'" in source, f"{words[1]} has no {flag}"
        return "parsed"
    if words[0] == "optuna-dashboard":
        return "skipped: serves a web page"
    if words[0] == "torchrun":
        words = words[words.index("-m") + 1:]
        assert words[0] == "syncfree"
        parse_train_config(words[2:])
        return "parsed"
    assert words[0] == "syncfree", command
    sub, args = words[1], words[2:]
    monkeypatch.chdir(tmp_path)
    if any(p in command for p in PLACEHOLDERS) or "<" in command:
        if sub == "tune":  # the space file is read when the study starts
            parse_tune_arguments(args)
            return "parsed"
        if sub == "doctor":
            doctor.parse_arguments(args)
            return "parsed"
        if sub == "train" and "--config" not in args:  # the options parse; the files are read when training
            parse_train_config(args)
            return "parsed"
        return "skipped: names the reader's own files"
    if sub == "train":
        if "--help" in args:
            with pytest.raises(SystemExit) as info:
                cli.main(words[1:])
            assert info.value.code == 0
            return "ran"
        cfg = parse_train_config(args)
        # run it for one iteration (or one more after a resumed checkpoint), into the test's folder, on at most
        # DOCS_ENVS envs where the command does not choose (one iteration of a 4,096-env recurrent run is minutes)
        iterations = 2 if cfg.resume else 1
        fewer = [] if cfg.resume or "--env.num_envs" in args or cfg.env.num_envs <= DOCS_ENVS else [
            "--env.num_envs", str(DOCS_ENVS)]
        assert cli.main(["train", *args, *fewer, "--iterations", str(iterations), "--log.progress", "false",
                         *([] if cfg.resume else ["--log.dir", str(tmp_path / "runs")])]) == 0, command
        return "ran"
    if sub == "tune":  # a study trains for minutes: its options parse (tests/test_tune.py runs small ones)
        parse_tune_arguments(args)
        return "parsed"
    if sub == "bench":
        parse_bench_arguments(args)
        return "parsed"
    if sub == "doctor":
        doctor.parse_arguments(args)
        return "parsed"
    if sub == "export":
        pytest.importorskip("onnx")
    if sub in ("eval", "play", "export", "plot", "tasks", "switches"):
        assert cli.main(words[1:]) == 0, command
        return "ran"
    raise AssertionError(f"no check for {command!r}")


def check_install(command: str) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extras in re.findall(r"\[([\w,]+)\]", command):
        for extra in extras.split(","):
            assert re.search(rf"^{extra} = \[", pyproject, flags=re.M), f"no extra {extra!r} in pyproject.toml"


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_every_documented_command_runs_or_parses(page: str, command: str, small_run: Path, tmp_path: Path,
                                                 monkeypatch, capsys) -> None:
    done = check(command, small_run, tmp_path, monkeypatch, capsys)
    assert done in ("ran", "parsed", "checked the extras") or done.startswith("skipped: "), done
