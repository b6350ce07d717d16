"""The mutation check: every deliberate bug in ``tests/mutants/*.toml`` must be caught by the tests it names.

    python scripts/mutants.py                 # every mutant, two at a time (what `make mutants` runs)
    python scripts/mutants.py --list          # name, file and tests of each, nothing run
    python scripts/mutants.py --only NAME     # one mutant (repeatable)
    python scripts/mutants.py --file tests/mutants/mutants.toml   # the mutants of one file (repeatable)
    python scripts/mutants.py --baseline      # first check that the named tests pass on the unmutated code
    python scripts/mutants.py --durations 20  # then the 20 slowest mutants, with the tests each ran

A mutant file holds entries of this form (one file per branch, so that branches never conflict)::

    [[mutant]]
    name = "kebab-case-unique-id"
    file = "shapeviz/fleet/design.py"                   # from the repository root
    anchor = '''exact text that occurs exactly once in that file'''
    replacement = '''the deliberately wrong text'''
    tests = ["tests/unit/test_fleet.py::test_name"]     # pytest node ids that must FAIL on it
    why = "what a user would see if this bug shipped"

Each mutant's pytest is a fork of one server process that has the third-party libraries imported (pandas, numba,
streamlit, ...; ``PRELOAD``), never the project's own code, which each fork imports from its mutated copy: that
halves the check's time, and ``--no-fork`` runs each in a fresh interpreter instead, with the same verdicts. The fork
freezes what it inherited out of the garbage collector, and every copy gets the project's bytecode, compiled once per
check (``compile_bytecode``): together they halve a short mutant's CPU again. The server also sets numba's compiler
up once (``WARM_UP``, ~0.3 s of CPU that every mutant replaying a log paid), compiling nothing of the project.

Each mutant is applied to a copy of the checkout (the files git tracks plus untracked, unignored ones, so
uncommitted work is checked too): each worker makes one and reuses it, putting back after every mutant whatever the
mutant or its tests changed (``Workspace``), so that every mutant starts from the same copy. Only its named tests
are run there with this interpreter:
``python -m pytest -x -q -p no:cacheprovider -p no:randomly <tests>``, with no plugin loaded from the installed
packages' entry points (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``): xdist (one process per mutant), hypothesis' (its
``@given`` tests run without it), anyio's and platformdirs' (no test uses them) cost ~0.3 s of CPU a mutant to
import and assertion-rewrite, a third of the shortest mutants'; and without CI's marks (``_env``), so that a test
missing what it needs skips rather than fails.
The outcome, by pytest's exit code:

- 1 (a test failed or errored): **killed**, as it should be;
- 0 (every named test passed, or was skipped): **survived**: the tests do not see this bug;
- 2, 3, 4, 5 (interrupted, internal error, usage error such as a node id that does not exist, nothing collected):
  **broken**: the mutant says nothing about the tests and must be fixed;
- the anchor not found exactly once in the file: **no longer applies** (the code moved: fix the anchor).

A mutant of the compiled simulator loop (a file numba compiles, ``COMPILED``) runs the loop's source as Python
(``COMPILED_ENV``: numba's ``NUMBA_DISABLE_JIT``): the same statements on the same arrays, so its tests, which
compare the loop with the simulator's Python loop, see the bug as they would compiled, for ~1-5 s of CPU where a
recompile took 25-50 s. So every one of them runs, in CI too.
The long ones start first (``schedule``: those whose first test is one of the app's, ``APP_TESTS``, most of which
run a whole page), so that the short ones fill the end of the check on both workers.

Each mutant's line, ``--durations`` and the closing line give the CPU seconds its tests used (user + system of
its pytest and the processes it waited for): the figure that compares two checks run at different loads, where wall
seconds stretch 2-3 times.

The exit status is 0 only when every mutant run was killed. The last line is pytest-like, one "test" per mutant:
``N passed`` counts the mutants killed, ``N failed`` those that survived, were broken or no longer apply.
The named tests are assumed to pass on the unmutated code (a test failing there would "kill" every mutant):
`make test` runs the whole suite before this check; ``--baseline`` runs the named tests unmutated first.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import importlib.util
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import py_compile
import queue
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("name", "file", "anchor", "replacement", "tests", "why")
KILLED, SURVIVED, BROKEN, STALE = "killed", "survived", "broken", "no longer applies"
# Files numba compiles.
COMPILED = ("shapeviz/serving/sim_core.py",)
# A mutant of one runs their functions as Python (numba's NUMBA_DISABLE_JIT; the fork reads numba's settings again,
# ``_numba_settings_read_again``). Compiling the mutated loop took 25-50 s of CPU a mutant (even unoptimised), so CI
# ran 6 of them, drawn per commit; as Python all 32 take ~45 s together, every one killed as when compiled
# (benchmarks/README.md). The two differ where no correct loop goes: an index out of bounds raises here and reads
# garbage compiled, and integers wrap compiled. Every other mutant loads the checkout's cached, compiled loop.
COMPILED_ENV = {"NUMBA_DISABLE_JIT": "1"}
# The app's tests, most of which run a whole Streamlit page (AppTest): a mutant whose first test is one of them takes
# 30-160 s at load 15-30, against ~10-30 s for most others.
APP_TESTS = "tests/app/"
# One mutant's tests should take seconds; a mutant that hangs them (an endless loop) is reported, not waited on.
# The longest take ~160 s at a load of 30 (a page's AppTest); a replay that spins on a bug now stops with an
# error (the compiled loop's no-progress guards), so half the former 600 s is still twice the longest.
TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug: replace ``anchor`` by ``replacement`` in ``file``; ``tests`` must then fail."""

    name: str
    file: str
    anchor: str
    replacement: str
    tests: tuple[str, ...]
    why: str
    source: str  # the TOML file it came from, for messages


@dataclass(frozen=True)
class Outcome:
    """What happened to one mutant: its result, the seconds its tests took, and the lines that say why."""

    mutant: Mutant
    result: str
    seconds: float
    detail: str = ""
    cpu: float | None = None   # CPU seconds of its pytest (user + system, with its children); None when not known


def load(paths: list[Path], root: Path = ROOT) -> list[Mutant]:
    """Every ``[[mutant]]`` of ``paths``; a missing field, an empty test list or a repeated name is an error."""
    mutants: list[Mutant] = []
    seen: dict[str, str] = {}
    for path in paths:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("mutant", [])
        where = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        for i, entry in enumerate(entries):
            missing = [f for f in FIELDS if f not in entry]
            if missing:
                raise ValueError(f"{where}: mutant #{i + 1} ({entry.get('name', '?')}) lacks {', '.join(missing)}")
            tests = entry["tests"]
            if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t for t in tests):
                raise ValueError(f"{where}: mutant {entry['name']!r}: tests must be a non-empty list of node ids")
            if entry["anchor"] == entry["replacement"]:
                raise ValueError(f"{where}: mutant {entry['name']!r} replaces its anchor by itself")
            if entry["name"] in seen:
                raise ValueError(f"{where}: mutant name {entry['name']!r} is also used in {seen[entry['name']]}")
            seen[entry["name"]] = where
            mutants.append(Mutant(entry["name"], entry["file"], entry["anchor"], entry["replacement"],
                                  tuple(tests), entry["why"], where))
    return mutants


def tree_files(root: Path) -> list[str]:
    """The checkout's files as git sees them (tracked, plus untracked ones not ignored); every file without git."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "__pycache__", ".venv", ".pytest_cache"}
        return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
                if p.is_file() and not skip.intersection(p.relative_to(root).parts)]


def _env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's environment for the copy: its venv first on PATH, the shared data where the checkout
    finds it (the tests look for ``../shared`` beside the checkout, which a copy elsewhere does not have), and
    ``extra`` (``COMPILED_ENV`` for a mutant of the compiled loop). Not CI's marks (``CI``, ``BUILD_NUMBER``): under
    ``CI=true`` a test missing what it needs fails instead of skipping, which would count as a kill, and pytest
    writes each failed assertion's diff in full, which for long lists took seconds of CPU; without them such a test
    skips, so its mutant survives and the check says so."""
    env = {k: v for k, v in {**os.environ, **(extra or {})}.items() if k not in ("CI", "BUILD_NUMBER")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # what pytest needs is named in its arguments (``_pytest_args``)
    shared = root.parent / "shared"
    for var, path in (("SHAPEVIZ_TRACES", shared / "data" / "traces"), ("SHAPEVIZ_REFERENCE", shared / "reference")):
        if var not in env and path.exists():
            env[var] = str(path)
    return env


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(line for line in text.strip().splitlines()[-lines:])


def compile_bytecode(root: Path, files: list[str], dest: Path) -> int:
    """Compile every Python file of the checkout once, into ``dest`` laid out as the checkout (``x/__pycache__/``),
    so that each mutant's copy imports the project's code from bytecode instead of compiling all of it again (about
    a quarter of a short mutant's CPU). The bytecode is checked against its source's hash on import
    (``CHECKED_HASH``), so the mutated file's is refused and compiled from its mutated text, whatever its mtime.
    Returns how many files were compiled; one that does not compile is left to the import to report."""
    compiled = 0
    for rel in files:
        if rel.endswith(".py"):
            try:
                py_compile.compile(str(root / rel), cfile=str(dest / importlib.util.cache_from_source(rel)),
                                   dfile=rel, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                compiled += 1
            except (py_compile.PyCompileError, OSError, ValueError):
                pass
    return compiled


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:   # another file system
        shutil.copy2(src, dst)


def _copy(root: Path, files: list[str], dest: Path, bytecode: Path | None = None) -> dict[str, Path]:
    """Copy ``files`` of ``root`` to ``dest``, with the checkout's ``bytecode`` linked in and numba's cache;
    returns where each file of ``dest`` came from (its path relative to ``dest`` to its source), which a worker's
    copy restores files from (``Workspace``)."""
    origin: dict[str, Path] = {}
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel)
        origin[rel] = root / rel
    if bytecode is not None:   # linked, not copied: nothing writes bytecode in a copy (PYTHONDONTWRITEBYTECODE)
        shutil.copytree(bytecode, dest, dirs_exist_ok=True, copy_function=_link)
        for path in bytecode.rglob("*"):
            if path.is_file():
                origin[str(path.relative_to(bytecode))] = path
    # numba's on-disk cache of the compiled simulator loop (~20 s of CPU to build) is valid for a copy whose source
    # keeps its size and mtime (copy2), so a mutant elsewhere reuses it; a mutated module's is removed while it runs
    # (``Workspace.applied``)
    for cached in _numba_cache(root):
        source = cached.parent.parent / (cached.name.split(".")[0] + ".py")
        if source.is_file():
            target = dest / cached.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(cached, target)
            origin[str(cached.relative_to(root))] = cached
    return origin


def _numba_cache(root: Path, file: str | None = None) -> list[Path]:
    """numba's cache files under ``root`` (of the module ``file`` alone, when given): index and machine code."""
    if file is None:
        return sorted(root.glob("shapeviz/**/__pycache__/*.nb[ic]"))
    source = root / file
    return sorted(source.parent.glob(f"__pycache__/{source.stem}.*.nb[ic]"))


def _tree(top: Path) -> tuple[dict[str, tuple[int, int]], set[str]]:
    """Every file under ``top`` with its size and mtime (ns), and every folder: what a test could have changed."""
    files: dict[str, tuple[int, int]] = {}
    folders: set[str] = set()
    for here, dirs, names in os.walk(top):
        rel = os.path.relpath(here, top)
        folders.update(os.path.normpath(os.path.join(rel, d)) for d in dirs)
        for name in names:
            st = os.lstat(os.path.join(here, name))
            files[os.path.normpath(os.path.join(rel, name))] = (st.st_size, st.st_mtime_ns)
    return files, folders


class Workspace:
    """One worker's copy of the checkout, made once and used for mutant after mutant: each is written into it, its
    tests run, and the copy is then put back as it was made. Copying the checkout for every mutant cost 0.3-0.5 s of
    CPU (1-2 s of wall at load 9) against 0.4-0.8 s for the shortest mutants' tests.

    Putting it back is checked, not assumed: after each mutant every file and folder of the copy is compared (size
    and mtime) with the copy as made; a file changed or removed, the mutated one or any a test wrote into (a report,
    a cache entry, numba's cache of the mutated loop), is copied again from where it came from, and a file or folder
    that was not there is removed. So each mutant sees the copy exactly as the next one does, whatever the last
    one's tests wrote. A mutant of a file numba compiles never sees that file's cached machine code (it is removed
    while the mutant runs, and put back after): numba checks its cache against the source's size and mtime only,
    which a mutated file could keep. (The files of ``COMPILED`` run as Python; this keeps any other compiled file
    honest.)"""

    def __init__(self, root: Path, files: list[str], bytecode: Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="mutant-workspace-"))
        self.origin = _copy(root, files, self.path, bytecode=bytecode)
        self.linked = {rel for rel, source in self.origin.items() if bytecode and source.is_relative_to(bytecode)}
        self.files, self.folders = _tree(self.path)
        self.restored = 0   # files put back (or removed) after a mutant, the mutated one included
        self.written: collections.Counter[str] = collections.Counter()   # those a mutant's tests changed or added

    @contextlib.contextmanager
    def applied(self, mutant: Mutant, text: str) -> Iterator[Path]:
        """The copy's path with ``text`` (the mutated file) written in and that file's cached machine code removed;
        the copy put back as it was made when the block ends (``restore``)."""
        cache = _numba_cache(self.path, mutant.file)
        mutated = {mutant.file, *(str(path.relative_to(self.path)) for path in cache)}
        for cached in cache:
            cached.unlink()
        target = self.path / mutant.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        try:
            yield self.path
        finally:
            self.written.update(rel for rel in self.restore() if rel not in mutated)

    def restore(self) -> list[str]:
        """Put the copy back as it was made; the paths (relative) that had to be copied again or removed."""
        files, folders = _tree(self.path)
        changed = sorted(rel for rel in files.keys() - self.files.keys())
        for rel in changed:
            (self.path / rel).unlink()
        for rel in sorted(folders - self.folders, key=len, reverse=True):
            shutil.rmtree(self.path / rel, ignore_errors=True)
        for rel, stat in self.files.items():
            if files.get(rel) != stat:
                changed.append(rel)
                target, source = self.path / rel, self.origin[rel]
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                target.unlink(missing_ok=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                if rel in self.linked:
                    _link(str(source), str(target))
                else:
                    shutil.copy2(source, target)
        self.restored += len(changed)
        return changed

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class Workspaces:
    """A copy per worker thread, made when it first needs one (``lease``), all removed by ``close``."""

    def __init__(self, root: Path, files: list[str], bytecode: Path | None = None) -> None:
        self.root, self.files, self.bytecode = root, files, bytecode
        self._free: queue.SimpleQueue[Workspace] = queue.SimpleQueue()
        self._all: list[Workspace] = []

    @contextlib.contextmanager
    def lease(self) -> Iterator[Workspace]:
        try:
            workspace = self._free.get_nowait()
        except queue.Empty:
            workspace = Workspace(self.root, self.files, self.bytecode)
            self._all.append(workspace)
        try:
            yield workspace
        finally:
            self._free.put(workspace)

    @property
    def restored(self) -> int:
        return sum(w.restored for w in self._all)

    def written(self, n: int = 3) -> str:
        """The files the mutants' tests most often wrote into their copy (each a test that writes into the
        checkout when run there), with how many mutants' tests did."""
        counts = sum((w.written for w in self._all), collections.Counter())
        return ", ".join(f"{rel} ({k})" for rel, k in counts.most_common(n)) or "none"

    def close(self) -> None:
        for workspace in self._all:
            workspace.close()


# The third-party libraries every mutant's tests import (~2.5 s of CPU a process: a third of a typical mutant's
# run). A fork server imports them once; each mutant's pytest is a fork of it, so it starts with them loaded and
# imports only the copy's own code (nothing of the project is ever imported before the fork). Libraries are the
# same for every mutant, so sharing their import changes no outcome; `--no-fork` runs each as a fresh process.
PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.compute", "pyarrow.csv", "pyarrow.json", "pyarrow.parquet",
           "scipy.optimize", "scipy.stats", "sklearn.cluster", "numba", "plotly.graph_objects", "plotly.io",
           "streamlit", "streamlit.testing.v1", "yaml", "zstandard", "pytest", "_pytest.python")
# Then what those libraries set up on first use (numba's compiler), done once in the server: a module of this folder,
# imported by its own name (never as part of the package ``scripts``, which each fork imports from its copy).
WARM_UP = "mutants_warm_up"
_fork_context: multiprocessing.context.BaseContext | None = None


def use_fork_server() -> None:
    """Run mutants' tests as forks of one process that has the libraries of PRELOAD imported (POSIX only)."""
    global _fork_context
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, WARM_UP])
    # started now, with this folder on its PYTHONPATH so that it finds WARM_UP (python 3.11's server does not take
    # this process's sys.path; each fork does, as it starts); this environment, which the forks' tests get
    # (``_env``), is left as it was
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), *([before] if before else [])])
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    _fork_context = context


def _pytest_args(tests: list[str] | tuple[str, ...], workers: int) -> list[str]:
    # no plugin of an installed package loads by itself (``_env``): one process per mutant, two mutants at once, and
    # hypothesis' @given tests run without its plugin. The baseline, one long run of every named test, takes two
    # processes instead (~110 s alone on two cores), so it names xdist.
    parallel = ["-p", "xdist.plugin", "-n", str(workers)] if workers > 1 else []
    return ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *parallel, *tests]


def _cpu_seconds() -> float:
    """CPU seconds (user + system) this process and the children it waited for have used."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _numba_settings_read_again() -> None:
    """numba as the fork's environment says (``COMPILED_ENV``), not as the server's did: numba read its settings
    as the server imported it, and its decorators consult them each time they are applied. numba compares its
    ``NUMBA_*`` variables with those it last read and applies them only when they changed."""
    from numba.core import config
    config.reload_config()


def _forked_pytest(args: list[str], cwd: str, env: dict[str, str], output: str) -> None:
    """In a fork of the server: become ``python -m pytest ARGS`` run in ``cwd`` with ``env``, output to a file, and
    pytest's exit code and its CPU seconds (``_cpu_seconds``: the figure a loaded machine does not stretch, as wall
    time is) to ``output`` + ".exit".

    The libraries the fork inherits are frozen out of the garbage collector first (``gc.freeze``): pytest collects
    five times as it closes, and each full collection walked their ~220,000 objects, about half a short mutant's
    CPU (and a copy of every page it touched). Only what the fork itself creates is collected, as in a fresh
    interpreter that had imported nothing."""
    gc.freeze()
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _numba_settings_read_again()
    sys.dont_write_bytecode = True
    sys.path[0:1] = [cwd]   # where `python -m pytest` run in the copy looks first: the copy, not this script's folder
    sys.argv = ["pytest", *args]
    import pytest
    code = int(pytest.main(args))
    sys.stdout.flush()
    sys.stderr.flush()
    Path(output + ".exit").write_text(f"{code} {_cpu_seconds():.3f}", encoding="utf-8")
    os._exit(code)


def _fresh_pytest(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """``command`` as a new process: its completed process (output and error in one) and its CPU seconds, user +
    system with the processes it waited for (``os.wait4``); ``subprocess.TimeoutExpired`` past ``TIMEOUT_S``."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                raise subprocess.TimeoutExpired(command, TIMEOUT_S)
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait for it again
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    return subprocess.CompletedProcess(command, proc.returncode, text, ""), usage.ru_utime + usage.ru_stime


def _pytest(python: str, tests: list[str] | tuple[str, ...], cwd: Path, root: Path, workers: int = 1,
            extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float | None]:
    """Run ``tests`` in ``cwd``: pytest's completed process and its CPU seconds. A fork of the server when there is
    one, a new interpreter otherwise or for several workers; ``extra_env`` is added to the tests' environment."""
    args = _pytest_args(tests, workers)
    env = _env(root, extra_env)
    if _fork_context is None or workers > 1 or python != sys.executable:
        return _fresh_pytest([python, "-m", "pytest", *args], cwd, env)
    with tempfile.NamedTemporaryFile(prefix="mutant-output-", suffix=".txt", delete=False) as out:
        output = out.name
    try:
        child = _fork_context.Process(target=_forked_pytest, args=(args, str(cwd), env, output))
        child.start()
        child.join(TIMEOUT_S)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["pytest", *args], TIMEOUT_S)
        text = Path(output).read_text(encoding="utf-8", errors="replace")
        report = Path(output + ".exit")   # "<pytest's exit code> <CPU seconds>", written by the fork as it ends
        said = report.read_text(encoding="utf-8").split() if report.is_file() else None
    finally:
        os.unlink(output)
        report.unlink(missing_ok=True)
    # pytest's exit code as the fork wrote it down. The process's own, as the fork server reports it, only when the
    # fork ended before that: the report can be lost (multiprocessing then says 255, which once made a killed
    # mutant "broken" in CI), and a fork that died in pytest wrote nothing.
    exited = child.exitcode if child.exitcode is not None and child.exitcode >= 0 else 3
    code, cpu = (int(said[0]), float(said[1])) if said else (exited, None)
    return subprocess.CompletedProcess(["pytest", *args], code, text, ""), cpu


def baseline(mutants: list[Mutant], root: Path, files: list[str], python: str = sys.executable,
             workers: int = 2, bytecode: Path | None = None) -> tuple[bool, str]:
    """Every test the mutants name, once, on an unmutated copy: a test that fails there would 'kill' any mutant."""
    tests = sorted({t for m in mutants for t in m.tests})
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as tmp:
        _copy(root, files, Path(tmp), bytecode=bytecode)
        proc, _ = _pytest(python, tests, Path(tmp), root, workers=workers)
    return proc.returncode == 0, _tail(proc.stdout + proc.stderr)


def run(mutant: Mutant, root: Path, files: list[str], python: str = sys.executable,
        bytecode: Path | None = None, workspaces: Workspaces | None = None) -> Outcome:
    """Apply ``mutant`` to a worker's copy of ``files`` under ``root`` (from ``workspaces``; a copy of its own
    without), with the checkout's ``bytecode`` (see ``compile_bytecode``), run its tests there, and say what
    happened. The copy is put back as it was made before the next mutant uses it (``Workspace.restore``)."""
    target = root / mutant.file
    if not target.is_file():
        return Outcome(mutant, STALE, 0.0, f"{mutant.file} does not exist")
    text = target.read_text(encoding="utf-8")
    count = text.count(mutant.anchor)
    if count != 1:
        return Outcome(mutant, STALE, 0.0, f"its anchor occurs {count} times in {mutant.file} (must be exactly once)")
    own = workspaces is None
    workspaces = workspaces or Workspaces(root, files, bytecode)
    try:
        with workspaces.lease() as workspace, \
                workspace.applied(mutant, text.replace(mutant.anchor, mutant.replacement)) as copy:
            start = time.perf_counter()
            try:
                proc, cpu = _pytest(python, mutant.tests, copy, root,
                                    extra_env=COMPILED_ENV if mutant.file in COMPILED else None)
            except subprocess.TimeoutExpired:
                return Outcome(mutant, BROKEN, time.perf_counter() - start, f"its tests ran past {TIMEOUT_S} s")
            seconds = time.perf_counter() - start
    finally:
        if own:
            workspaces.close()
    out = _tail(proc.stdout + proc.stderr)
    if proc.returncode == 1:
        return Outcome(mutant, KILLED, seconds, out, cpu)
    if proc.returncode == 0:
        return Outcome(mutant, SURVIVED, seconds, out, cpu)
    return Outcome(mutant, BROKEN, seconds, f"pytest exited {proc.returncode}\n{out}", cpu)


def schedule(mutants: list[Mutant]) -> list[Mutant]:
    """The order the mutants start in: the long ones first (those whose first test, the one that kills them under
    ``-x`` when it can, is one of the app's, most of which run a whole page), so that the short ones fill the end
    and no worker is left with a long one while the other idles."""
    return sorted(mutants, key=lambda m: not m.tests[0].startswith(APP_TESTS))


def _cpu(o: Outcome) -> str:
    return "-" if o.cpu is None else f"{o.cpu:.1f}"


def table(outcomes: list[Outcome], verbose: bool = False) -> str:
    """The result table: one row per mutant (name, result, seconds), then the detail of every one not killed (of
    every one with ``verbose``: how each killed mutant failed its tests)."""
    width = max([len(o.mutant.name) for o in outcomes] + [6])
    rows = [f"{'mutant':<{width}}  {'result':<17}  {'seconds':>7}  {'CPU s':>7}"]
    rows += [f"{o.mutant.name:<{width}}  {o.result:<17}  {o.seconds:7.1f}  {_cpu(o):>7}" for o in outcomes]
    for o in outcomes:
        if verbose or o.result != KILLED:
            rows += ["", f"{o.mutant.name}: {o.result} ({o.mutant.source}: {o.mutant.file})",
                     f"  why it matters: {o.mutant.why}", f"  tests: {' '.join(o.mutant.tests)}"]
            rows += [f"  | {line}" for line in o.detail.splitlines()]
    return "\n".join(rows)


def slowest(outcomes: list[Outcome], n: int) -> str:
    """The ``n`` mutants whose tests took longest, longest first, each with the tests it names: where the check's
    time goes, and which mutants a faster test that kills the same bug would shorten."""
    rows = [f"{'=' * 10} slowest {n} mutants {'=' * 10}"]
    for o in sorted(outcomes, key=lambda o: o.seconds, reverse=True)[:n]:
        rows.append(f"{o.seconds:7.1f}s  {_cpu(o):>7}s CPU  {o.mutant.name}  ({o.mutant.file})  "
                    f"{' '.join(o.mutant.tests)}")
    return "\n".join(rows)


def summary(outcomes: list[Outcome], seconds: float) -> str:
    """pytest's closing line, one test per mutant: killed ones passed the check, every other one failed it."""
    passed = sum(o.result == KILLED for o in outcomes)
    counts = {r: sum(o.result == r for o in outcomes) for r in (SURVIVED, BROKEN, STALE)}
    parts = [f"{passed} passed"] + ([f"{len(outcomes) - passed} failed"] if passed < len(outcomes) else [])
    why = ", ".join([f"{passed} killed"] + [f"{n} {r}" for r, n in counts.items() if n])
    cpu = [o.cpu for o in outcomes if o.cpu is not None]
    if cpu:   # the figure that compares two runs on a machine loaded differently (wall time stretches with load)
        why += f"; their tests used {sum(cpu):.0f} s of CPU"
    return f"{'=' * 10} {', '.join(parts)} in {seconds:.2f}s (mutation check: {why}) {'=' * 10}"


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    """Run the check; 0 when every mutant selected was killed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", action="append", type=Path,
                        help="a mutant file (repeatable; default: every tests/mutants/*.toml)")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show how each killed mutant failed too")
    parser.add_argument("--no-fork", action="store_true",
                        help="start each mutant's pytest as a fresh interpreter (default: forks of one that has "
                             "the third-party libraries imported)")
    parser.add_argument("--durations", type=int, default=0, metavar="N",
                        help="after the table, the N slowest mutants with the tests they ran (as pytest's)")
    parser.add_argument("--baseline", action="store_true",
                        help="first run every named test on the unmutated code (make test runs the suite first)")
    args = parser.parse_args(argv)

    paths = [p if p.is_absolute() else Path.cwd() / p for p in args.file] if args.file else \
        sorted((root / "tests" / "mutants").glob("*.toml"))
    mutants = load(paths, root)
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in mutants})
        if unknown:
            parser.error(f"no mutant named {', '.join(unknown)}")
        mutants = [m for m in mutants if m.name in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.name}\t{m.file}\t{' '.join(m.tests)}")
        return 0
    if not mutants:
        print("no mutants found", file=sys.stderr)
        return 5

    files = tree_files(root)
    if not args.no_fork:
        use_fork_server()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mutant-bytecode-") as tmp:
        bytecode = Path(tmp)
        compile_bytecode(root, files, bytecode)
        if args.baseline:
            ok, detail = baseline(mutants, root, files, workers=max(1, args.jobs), bytecode=bytecode)
            if not ok:
                print(f"the named tests fail on the unmutated code, so no mutant can be judged:\n{detail}")
                return 1
        done: dict[str, Outcome] = {}
        workspaces = Workspaces(root, files, bytecode)
        try:
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                futures = [pool.submit(run, m, root, files, bytecode=bytecode, workspaces=workspaces)
                           for m in schedule(mutants)]
                for i, future in enumerate(as_completed(futures), 1):
                    o = future.result()
                    done[o.mutant.name] = o
                    print(f"[{i}/{len(mutants)}] {o.mutant.name}: {o.result} ({o.seconds:.1f} s, {_cpu(o)} s CPU)",
                          flush=True)
        finally:
            workspaces.close()
        restored, written = workspaces.restored, workspaces.written()
    outcomes = [done[m.name] for m in mutants]
    print()
    print(table(outcomes, args.verbose))
    if args.durations:
        print()
        print(slowest(outcomes, args.durations))
    print(f"(the workers' copies of the checkout were put back after each mutant: {restored} files copied again or "
          f"removed, the mutated ones included; written by the tests most often: {written})")
    print(summary(outcomes, time.perf_counter() - start))
    return 0 if all(o.result == KILLED for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
