"""The mutation check itself (scripts/mutants.py), on a tiny checkout: a bug the tests see is killed, one they miss
survives and fails the run, an anchor that moved or a test that does not exist is never counted as a kill."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from scripts import mutants

CALC = "def add(a, b):\n    return a + b\n"
TESTS = """from calc import add


def test_adds():
    assert add(2, 3) == 5


def test_zero():
    assert add(0, 0) == 0
"""
MUTANTS = """
[[mutant]]
name = "subtracts"
file = "calc.py"
anchor = '''a + b'''
replacement = '''a - b'''
tests = ["tests/test_calc.py::test_adds"]
why = "2 + 3 is -1"

[[mutant]]
name = "multiplies"
file = "calc.py"
anchor = '''a + b'''
replacement = '''a * b'''
tests = ["tests/test_calc.py::test_zero"]
why = "0 * 0 is 0 too: this test cannot see it"

[[mutant]]
name = "anchor-moved"
file = "calc.py"
anchor = '''a+b'''
replacement = '''a - b'''
tests = ["tests/test_calc.py::test_adds"]
why = "the code was reformatted"

[[mutant]]
name = "no-such-test"
file = "calc.py"
anchor = '''a + b'''
replacement = '''a - b'''
tests = ["tests/test_calc.py::test_renamed"]
why = "the test it names was renamed"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout with one module, its tests, a pytest.ini and a mutant file (no git: every file is copied)."""
    root = tmp_path / "repo"
    (root / "tests" / "mutants").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (root / "tests" / "mutants" / "calc.toml").write_text(MUTANTS)
    return root


@pytest.mark.parametrize("start", [[], ["--no-fork"]], ids=["forked", "fresh-interpreter"])
def test_each_mutant_is_judged_by_what_its_tests_did(checkout: Path, capsys: pytest.CaptureFixture[str],
                                                     start: list[str]) -> None:
    """The same verdicts whether each mutant's pytest is a fork of the preloaded server or a new interpreter."""
    status = mutants.main(start, root=checkout)
    out = capsys.readouterr().out
    names = {"subtracts", "multiplies", "anchor-moved", "no-such-test"}
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in names}
    assert "killed" in rows["subtracts"]
    assert "survived" in rows["multiplies"], out           # a bug the tests cannot see is never reported as caught
    assert "no longer applies" in rows["anchor-moved"]
    assert "broken" in rows["no-such-test"]                  # pytest's "not found" is not a failing test
    assert status == 1
    closing = out.strip().splitlines()[-1]
    assert closing.startswith("=") and "1 passed, 3 failed in " in closing
    assert "1 killed, 1 survived, 1 broken, 1 no longer applies" in closing
    assert (checkout / "calc.py").read_text() == CALC        # the checkout itself is never mutated


def test_the_check_passes_only_when_every_mutant_is_killed(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mutants.main(["--only", "subtracts"], root=checkout) == 0
    assert "1 passed in " in capsys.readouterr().out.strip().splitlines()[-1]
    assert mutants.main(["--only", "multiplies"], root=checkout) == 1


def test_a_mutant_file_with_a_repeated_name_or_no_tests_is_refused(checkout: Path) -> None:
    bad = checkout / "tests" / "mutants" / "bad.toml"
    bad.write_text("[[mutant]]" + MUTANTS.split("[[mutant]]")[1])
    with pytest.raises(ValueError, match="'subtracts' is also used in"):
        mutants.load(sorted((checkout / "tests" / "mutants").glob("*.toml")), checkout)
    bad.write_text('[[mutant]]\nname = "x"\nfile = "calc.py"\nanchor = "a"\nreplacement = "b"\ntests = []\nwhy = ""\n')
    with pytest.raises(ValueError, match="non-empty list"):
        mutants.load([bad], checkout)


def test_every_mutant_of_the_repository_is_well_formed_and_applies() -> None:
    found = mutants.load(sorted((mutants.ROOT / "tests" / "mutants").glob("*.toml")))
    assert found, "no mutants in tests/mutants/"
    for m in found:
        path = mutants.ROOT / m.file
        assert path.is_file(), f"{m.name}: {m.file} does not exist"
        assert path.read_text(encoding="utf-8").count(m.anchor) == 1, f"{m.name}: anchor not exactly once"
        for node in m.tests:
            assert (mutants.ROOT / node.split("::")[0]).is_file(), f"{m.name}: no test file for {node}"


def test_a_test_failing_on_the_unmutated_code_is_caught_by_the_baseline(checkout: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A test that fails anyway would 'kill' every mutant it names: --baseline refuses to judge them. On code whose
    tests pass it lets the check go on (its two pytest workers load xdist, though no plugin loads by itself)."""
    assert mutants.main(["--baseline", "--only", "subtracts"], root=checkout) == 0
    assert "fail on the unmutated code" not in capsys.readouterr().out
    (checkout / "calc.py").write_text(CALC.replace("a + b", "a + b + 1"))
    assert mutants.main(["--baseline", "--only", "multiplies"], root=checkout) == 1
    assert "fail on the unmutated code" in capsys.readouterr().out


def test_the_long_mutants_start_first_and_the_short_ones_fill_the_end() -> None:
    # two at a time, the check ends when its last mutant does: a page's AppTest (30-160 s) started last leaves one
    # worker idle for minutes, so those start before every other one
    every = mutants.load(sorted((mutants.ROOT / "tests" / "mutants").glob("*.toml")), mutants.ROOT)
    order = mutants.schedule(every)
    assert sorted(m.name for m in order) == sorted(m.name for m in every)
    kinds = ["page" if m.tests[0].startswith(mutants.APP_TESTS) else "other" for m in order]
    assert {"page", "other"} <= set(kinds)
    # not a comparison of the two lists: pytest's diff of ~600 items, in full under CI=true, took 20 s of CPU
    late = [i for i, kind in enumerate(kinds) if kind == "page" and i > kinds.index("other")]
    assert not late, f"{len(late)} mutants of the app's tests start after a short one, the first at {late[:1]}"


def test_each_copy_imports_the_checkouts_bytecode_but_runs_the_mutated_text(checkout: Path, tmp_path: Path) -> None:
    # the project's code is compiled once per check, not once per mutant; the mutated file's bytecode (copied with
    # the rest) must be refused, or the mutant's tests would run the unmutated code and every mutant would survive
    files = mutants.tree_files(checkout)
    assert mutants.compile_bytecode(checkout, files, tmp_path / "bytecode") == 2    # calc.py and the test file
    copy = tmp_path / "copy"
    mutants._copy(checkout, files, copy, bytecode=tmp_path / "bytecode")
    (copy / "calc.py").write_text(CALC.replace("a + b", "a - b"))
    assert (copy / importlib.util.cache_from_source("tests/test_calc.py")).is_file()
    probe = "import calc, sys; sys.stdout.write(str(calc.add(2, 3)))"
    out = subprocess.run([sys.executable, "-B", "-c", probe], cwd=copy, capture_output=True, text=True, check=True)
    assert out.stdout == "-1"


def test_a_forked_mutant_leaves_the_preloaded_libraries_out_of_its_garbage_collections(checkout: Path) -> None:
    # pytest collects garbage five times as it closes; walking the ~220,000 objects of the libraries a fork inherits
    # was half a short mutant's CPU. Frozen in the fork, they are never walked (the test below sees them frozen).
    (checkout / "tests" / "test_fork.py").write_text("import gc\n\n\ndef test_frozen():\n"
                                                     "    assert gc.get_freeze_count() > 10_000\n")
    mutants.use_fork_server()
    proc, _ = mutants._pytest(sys.executable, ["tests/test_fork.py"], checkout, checkout)
    assert proc.returncode == 0, proc.stdout


BUSY = """

def test_busy_then_adds():
    import time
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass
    assert add(2, 3) == 5
"""


def test_a_forked_mutant_says_how_much_cpu_its_tests_used(checkout: Path) -> None:
    # wall seconds stretch with the machine's load (x2-3 between two CI runs); the CPU seconds a mutant's tests used
    # do not, so they are what compares two checks, or two ways of running one mutant, on a shared machine
    (checkout / "tests" / "test_calc.py").write_text(TESTS + BUSY)
    subtracts = next(m for m in mutants.load([checkout / "tests" / "mutants" / "calc.toml"], checkout)
                     if m.name == "subtracts")
    busy = mutants.Mutant(**{**subtracts.__dict__, "tests": ("tests/test_calc.py::test_busy_then_adds",)})
    mutants.use_fork_server()
    outcome = mutants.run(busy, checkout, mutants.tree_files(checkout))
    assert outcome.result == mutants.KILLED, outcome.detail
    assert outcome.cpu is not None and 0.5 <= outcome.cpu <= outcome.seconds + 0.1
    assert f"{outcome.cpu:.1f}s CPU  subtracts" in mutants.slowest([outcome], 1)
    assert "their tests used 1 s of CPU" in mutants.summary([outcome], outcome.seconds)


def test_a_forked_mutant_is_judged_by_pytests_exit_code_even_when_the_servers_report_is_lost(
        checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # multiprocessing reads a forked process's exit code from the fork server, and says 255 when that pipe ends
    # early: in one CI run a killed mutant (its test failed, pytest said so) came back "broken" and failed the check
    from multiprocessing import popen_forkserver
    real_poll = popen_forkserver.Popen.poll

    def report_lost(self, flag=os.WNOHANG):
        if real_poll(self, flag) is not None:
            self.returncode = 255
        return self.returncode
    mutants.use_fork_server()
    monkeypatch.setattr(popen_forkserver.Popen, "poll", report_lost)
    proc, _ = mutants._pytest(sys.executable, ["tests/test_calc.py"], checkout, checkout)
    assert proc.returncode == 0, proc.stdout
    (checkout / "calc.py").write_text(CALC.replace("a + b", "a - b"))
    proc, _ = mutants._pytest(sys.executable, ["tests/test_calc.py"], checkout, checkout)
    assert proc.returncode == 1, proc.stdout


def test_the_slowest_mutants_are_listed_longest_first_with_their_tests() -> None:
    def outcome(name: str, seconds: float) -> mutants.Outcome:
        m = mutants.Mutant(name, "calc.py", "a", "b", (f"tests/test_calc.py::test_{name}",), "", "calc.toml")
        return mutants.Outcome(m, mutants.KILLED, seconds)
    lines = mutants.slowest([outcome("quick", 1.5), outcome("page", 90.0), outcome("mid", 7.0)], 2).splitlines()
    assert len(lines) == 3
    assert "page" in lines[1] and "tests/test_calc.py::test_page" in lines[1] and "90.0" in lines[1]
    assert "mid" in lines[2]


def test_a_forked_mutant_starts_with_numbas_compiler_set_up_but_none_of_the_projects_code(
        checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # numba's compiler set up once in the server (~0.3 s of CPU a mutant that replays a log); the project's compiled
    # loop never is: a fork that inherited it would judge a mutant of the loop on the unmutated loop. (A process
    # child imports its parent's __main__ again: here that is pytest's, unless an AppTest earlier in this process
    # left app.py there, as Streamlit does; the check's own is scripts/mutants.py.)
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    (checkout / "tests" / "test_fork.py").write_text(
        "import sys\n\nfrom numba.core.registry import cpu_target\n\n\ndef test_warm():\n"
        "    assert '_toplevel_target_context' in vars(cpu_target)\n"
        "    assert not [m for m in sys.modules if m.split('.')[0] in ('shapeviz', 'components', 'pages')]\n")
    mutants.use_fork_server()
    proc, _ = mutants._pytest(sys.executable, ["tests/test_fork.py"], checkout, checkout)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("start", [[], ["--no-fork"]], ids=["forked", "fresh-interpreter"])
def test_only_a_mutant_of_the_compiled_loop_runs_it_as_python(
        checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], start: list[str]) -> None:
    # compiling the mutated loop was 25-50 s of CPU a mutant, as Python its tests take ~1-5 s; every other mutant
    # loads the checkout's cached loop, compiled as users run it. The fork server imported numba with its compiler
    # on, so a fork must read numba's settings again for its decorators to leave functions as they are.
    (checkout / "tests" / "test_opt.py").write_text(
        "from numba import njit\n\n\ndef test_compiled():\n"
        "    assert hasattr(njit(lambda x: x + 1), 'py_func')   # a dispatcher, not the function itself\n")
    (checkout / "tests" / "mutants" / "calc.toml").write_text(
        "".join(f"[[mutant]]\nname = '{name}'\nfile = '{file}'\nanchor = '{anchor}'\nreplacement = '{wrong}'\n"
                f"tests = ['tests/test_opt.py']\nwhy = ''\n\n"
                for name, file, anchor, wrong in [("loop", "calc.py", "a + b", "a - b"),
                                                  ("other", "tests/test_calc.py", "== 5", "== 6")]))
    monkeypatch.setattr(mutants, "COMPILED", ("calc.py",))
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    mutants.main(start, root=checkout)
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("loop ", "other "))}
    assert "killed" in rows["loop"] and "survived" in rows["other"]
    assert float(rows["loop"].split()[-1]) > 0       # its CPU seconds, as measured


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh-interpreter"])
def test_a_mutants_pytest_loads_no_plugin_it_was_not_asked_for(checkout: Path, monkeypatch: pytest.MonkeyPatch,
                                                               forked: bool) -> None:
    # the installed packages' pytest plugins (anyio's, platformdirs', xdist, hypothesis') were imported and
    # assertion-rewritten by every mutant's pytest: ~0.3 s of CPU each, a third of the shortest mutants'
    (checkout / "tests" / "test_plugins.py").write_text(
        "def test_plugins(request):\n"
        "    names = {name for name, _ in request.config.pluginmanager.list_name_plugin()}\n"
        "    assert not names & {'anyio', 'platformdirs', 'xdist', 'xdist.looponfail', 'hypothesispytest'}, names\n")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)   # as in a shell, not in a mutant's run
    if forked:
        mutants.use_fork_server()
    else:
        monkeypatch.setattr(mutants, "_fork_context", None)
    proc, _ = mutants._pytest(sys.executable, ["tests/test_plugins.py"], checkout, checkout)
    assert proc.returncode == 0, proc.stdout


def test_a_test_that_cannot_run_never_kills_a_mutant_even_under_ci(checkout: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # under CI=true the suite fails a test whose trace or browser is missing (tests/needs.py): as a mutant's test
    # that failure would read as a kill; the mutant must survive instead, so that the check fails and says which
    (checkout / "tests" / "test_needs.py").write_text(
        "import os\n\nimport pytest\n\n\ndef test_needs_a_trace():\n"
        "    if os.environ.get('CI') == 'true':\n        pytest.fail('no trace, under CI')\n"
        "    pytest.skip('no trace')\n")
    (checkout / "tests" / "mutants" / "calc.toml").write_text(
        "[[mutant]]\nname = 'blind'\nfile = 'calc.py'\nanchor = 'a + b'\nreplacement = 'a - b'\n"
        "tests = ['tests/test_needs.py']\nwhy = ''\n")
    monkeypatch.setenv("CI", "true")
    assert mutants.main([], root=checkout) == 1
    assert "survived" in [line for line in capsys.readouterr().out.splitlines() if line.startswith("blind ")][0]


def test_a_mutant_of_a_compiled_file_never_gets_its_cached_machine_code(tmp_path: Path) -> None:
    # numba checks its cache of a file against the file's size and mtime only, never its text: beside a mutated file
    # that matched them (written within the mtime's resolution, by a tool that keeps mtimes), it would replay the
    # unmutated loop and the mutant would survive. So the mutated file's cache is not in the copy while its tests
    # run; other files' are (a mutant elsewhere loads the checkout's compiled loop instead of compiling it again),
    # and the worker's copy has the mutated file's back for the next mutant.
    root = tmp_path / "repo"
    cache = root / "shapeviz" / "serving" / "__pycache__"
    cache.mkdir(parents=True)
    files = ["shapeviz/serving/sim_core.py", "shapeviz/serving/other.py"]
    for rel in files:
        (root / rel).write_text("x = 1\n")
    for name in ("sim_core._loop-900.py311.nbi", "sim_core._loop-900.py311.1.nbc", "other.f-3.py311.nbi"):
        (cache / name).write_bytes(b"compiled")
    every = {p.name for p in cache.iterdir()}
    loop_cache = {"sim_core._loop-900.py311.nbi", "sim_core._loop-900.py311.1.nbc"}
    workspace = mutants.Workspace(root, files)
    try:
        for file, kept in [("shapeviz/serving/sim_core.py", {"other.f-3.py311.nbi"}),
                           ("shapeviz/serving/other.py", loop_cache)]:
            m = mutants.Mutant("m", file, "x = 1", "x = 2", ("t",), "", "m.toml")
            with workspace.applied(m, "x = 2\n") as copy:
                assert {p.name for p in (copy / "shapeviz" / "serving" / "__pycache__").iterdir()} == kept
            assert {p.name for p in (copy / "shapeviz" / "serving" / "__pycache__").iterdir()} == every
            assert (copy / file).read_text() == "x = 1\n"
    finally:
        workspace.close()


WRITES = """from pathlib import Path

from calc import add


def test_writes_then_fails():
    Path("data.txt").write_text("written by a test")
    Path("out").mkdir()
    (Path("out") / "report.html").write_text("left behind")
    Path("tests/test_calc.py").unlink()
    assert add(2, 3) == 5


def test_the_copy_is_as_made():
    assert Path("data.txt").read_text() == "as committed"
    assert Path("tests/test_calc.py").is_file() and not Path("out").exists()
    assert add(2, 3) == 5
"""
REUSE = """
[[mutant]]
name = "dirties-its-copy"
file = "calc.py"
anchor = 'a + b'
replacement = 'a - b'
tests = ["tests/test_writes.py::test_writes_then_fails"]
why = "its mutated file and its tests' writes must not reach the next mutant"

[[mutant]]
name = "next-in-the-same-copy"
file = "other.py"
anchor = 'X = 1'
replacement = 'X = 2'
tests = ["tests/test_writes.py::test_the_copy_is_as_made"]
why = "nothing reads X: survives, unless it saw the last mutant's copy"
"""


@pytest.mark.parametrize("start", [[], ["--no-fork"]], ids=["forked", "fresh-interpreter"])
def test_a_worker_reuses_its_copy_but_each_mutant_starts_from_the_copy_as_made(
        checkout: Path, capsys: pytest.CaptureFixture[str], start: list[str]) -> None:
    # one copy per worker, not per mutant (a copy cost 0.3-0.5 s of CPU, as much as the shortest mutants' tests):
    # the mutated file, and whatever its tests wrote, changed or removed, is put back before the next mutant runs,
    # or that mutant is judged on another's code (here it would be 'killed' by the last one's leftovers)
    (checkout / "other.py").write_text("X = 1\n")
    (checkout / "data.txt").write_text("as committed")
    (checkout / "tests" / "test_writes.py").write_text(WRITES)
    (checkout / "tests" / "mutants" / "calc.toml").write_text(REUSE)
    status = mutants.main([*start, "--jobs", "1"], root=checkout)
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("dirties", "next-in"))}
    assert "killed" in rows["dirties-its-copy"]
    assert "survived" in rows["next-in-the-same-copy"], out
    assert status == 1
    # calc.py, data.txt, out/report.html and the test file, then other.py
    assert "5 files copied again or removed" in out, out
    written = out.split("written by the tests most often: ")[1].splitlines()[0].removesuffix(")")
    assert set(written.split(", ")) == {"data.txt (1)", "out/report.html (1)", "tests/test_calc.py (1)"}, written
    assert (checkout / "calc.py").read_text() == CALC and (checkout / "data.txt").read_text() == "as committed"
