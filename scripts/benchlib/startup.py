"""How fast the ``turnlog`` command starts (issue 19): each command's wall time as a multiple of a bare
``python -c pass`` on the same machine, medians of repeated runs after warm-up runs (bytecode cached,
as a user has it), beside the targets: ``--version`` and ``--help`` within 5×, ``sessions`` and
``log`` on a small store within 8×. ``--only startup`` runs it alone and splices it into
``bench-results/RESULTS.md``; ``python scripts/benchlib/startup.py`` prints the table alone."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HEADING = "## Command startup (issue 19)"
ROOT = Path(__file__).resolve().parent.parent.parent

# name -> (the command's arguments after `turnlog --db STORE`, the target ratio to `python -c pass`).
COMMANDS: dict[str, tuple[tuple[str, ...], float]] = {
    "turnlog --version": (("--version",), 5.0),
    "turnlog --help": (("--help",), 5.0),
    "turnlog sessions": (("sessions",), 8.0),
    "turnlog log SESSION": (("log", "s1"), 8.0),
}
# The console script's own code: what `turnlog` runs (without the venv's wrapper file lookup).
ENTRY = "from turnlog.cli import main; main()"


def _time_once(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall time and the CPU time (user + system) of one run of ``argv``."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stderr.close()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {errors.decode(errors='replace').strip()}")
    return elapsed, usage.ru_utime + usage.ru_stime


def median_runs(argv: Sequence[str], env: dict[str, str], *, runs: int, warmup: int) -> tuple[float, float]:
    """The median wall time and the median CPU time of ``runs`` runs of ``argv``, after ``warmup``
    runs that are not counted (they write the bytecode caches and warm the file cache), like
    hyperfine's --warmup. The CPU time says the same on a busy machine, where wall times wander."""
    for _ in range(warmup):
        _time_once(argv, env)
    times = [_time_once(argv, env) for _ in range(runs)]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def small_store(folder: Path, env: dict[str, str]) -> Path:
    """A store of two sessions of ten messages each, written by the command line itself."""
    path = folder / "startup.db"
    lines = [
        json.dumps({"type": "message_appended", "role": role, "content": f"message {i} of {session}"})
        for session in ("s1", "s2")
        for i, role in enumerate(["user", "assistant"] * 5)
    ]
    for session in ("s1", "s2"):
        mine = [line for line in lines if f"of {session}" in line]
        subprocess.run(
            [sys.executable, "-c", ENTRY, "--db", str(path), "append", session],
            input="\n".join(mine),
            text=True,
            env=env,
            check=True,
            capture_output=True,
        )
    return path


def run(quick: bool, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Each command's median and its ratio to ``python -c pass``. The runs are interleaved (one of
    each command per round, the baseline included), so a load that comes and goes during the
    measurement weighs on every command alike."""
    runs, warmup = (5, 2) if quick else (21, 3)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="turnlog-startup-") as folder:
        store = small_store(Path(folder), env)
        argvs = {"python -c pass": [sys.executable, "-c", "pass"]}
        for name, (args, _) in COMMANDS.items():
            argvs[name] = [sys.executable, "-c", ENTRY, "--db", str(store), *args]
        log(f"startup: {len(argvs)} commands, {runs} interleaved rounds after {warmup} warm-up rounds")
        load = os.getloadavg()[0]
        for _ in range(warmup):
            for argv in argvs.values():
                _time_once(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in argvs}
        for _ in range(runs):
            for name, argv in argvs.items():
                times[name].append(_time_once(argv, env))
    wall = {name: statistics.median(t[0] for t in got) for name, got in times.items()}
    cpu = {name: statistics.median(t[1] for t in got) for name, got in times.items()}
    baseline, baseline_cpu = wall.pop("python -c pass"), cpu.pop("python -c pass")
    return {
        "baseline_s": baseline,
        "baseline_cpu_s": baseline_cpu,
        "runs": runs,
        "warmup": warmup,
        "load": load,
        "commands": {
            name: {
                "seconds": wall[name],
                "ratio": wall[name] / baseline,
                "cpu_ratio": cpu[name] / baseline_cpu,
                "target": target,
            }
            for name, (_, target) in COMMANDS.items()
        },
    }


def render(result: dict[str, Any], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `{command}`: each command run {result['runs']} times after {result['warmup']} "
        "warm-up runs (bytecode cached; the commands and the baseline take turns, round after round), "
        "the median wall time, as a multiple of a bare `python -c "
        f"pass` measured the same way ({result['baseline_s'] * 1000:.1f} ms on this machine; load "
        f"average {result['load']:.1f} at the start). The CPU column is the same ratio of CPU time (user "
        "+ system), which a busy machine disturbs less. The store holds two sessions of ten messages.",
        "",
        "| command | median | × python -c pass | CPU × | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, row in result["commands"].items():
        met = "yes" if row["ratio"] <= row["target"] else "**no**"
        lines.append(
            f"| `{name}` | {row['seconds'] * 1000:.1f} ms | {row['ratio']:.1f}× | {row['cpu_ratio']:.1f}× "
            f"| ≤ {row['target']:.0f}× | {met} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    print(render(run(quick, lambda text: print(text, file=sys.stderr)), "python scripts/benchlib/startup.py"))
