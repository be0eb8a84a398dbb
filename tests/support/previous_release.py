"""The previous release's real code, checked out and installed beside today's, for the skew tests.

A cluster being upgraded runs the previous release's operator and runtime while today's arrive
(and again after a rollback). Tests that model "the old code" from today's code cannot catch what
the old code refuses, so the skew tests run the old code itself: the commit ``releases.toml``
records for the latest release that is not the version being built, checked out with
``git worktree add --detach`` under ``.cache/releases/<commit>/src`` and installed into its own
venv (``.cache/releases/<commit>/venv``) with uv, as ``scripts/setup-dev`` installs today's.
Both are made once and reused while they are at the right commit.

``CACHEFLEET_PREVIOUS_RELEASE=<commit-ish>`` points the tests at another commit (for example an
older main, to show that a test catches a defect that commit had).

A missing commit (a shallow clone) is an error with the command that fixes it, never a skip.
The old code runs only in subprocesses, with ``PYTHONSAFEPATH=1`` (the repository's ``operator``
folder must not shadow the standard library) and without ``PYTHONPATH``, so that nothing of
today's tree leaks into it.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_OVERRIDE",
    "REPOSITORY",
    "PreviousReleaseError",
    "Release",
    "ReleaseCheckout",
    "checkout_previous_release",
    "current_version",
    "previous_release",
    "recorded_releases",
]

#: The repository root (this file is ``tests/support/previous_release.py``).
REPOSITORY = Path(__file__).resolve().parents[2]
#: Set to a commit-ish to test against that commit instead of the recorded previous release.
ENV_OVERRIDE = "CACHEFLEET_PREVIOUS_RELEASE"
#: The extras the skew tests need from the old release (those it has: older ones may lack some).
WANTED_EXTRAS = ("cpu", "operator")


class PreviousReleaseError(RuntimeError):
    """The previous release cannot be checked out or installed; the message says how to fix it."""


@dataclass(frozen=True)
class Release:
    """One release: its version and the full hash of the commit it was made from."""

    version: str
    commit: str


@dataclass(frozen=True)
class ReleaseCheckout:
    """An installed checkout of one release: run its ``cachefleet`` or its Python."""

    release: Release
    root: Path
    python: Path
    cachefleet: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment made safe for the old code: its venv first on ``PATH``,
        no ``PYTHONPATH`` or ``VIRTUAL_ENV`` of today's tree, no ``CACHEFLEET_*`` settings of
        the test run (only ``extra``'s), ``PYTHONSAFEPATH=1``."""
        env = {k: v for k, v in _without_pythonpath().items() if not k.startswith("CACHEFLEET_")}
        env["PATH"] = f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONSAFEPATH"] = "1"
        env.update(extra or {})
        return env

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``cachefleet ARGS`` of this release; the caller checks ``returncode``."""
        return subprocess.run(
            [str(self.cachefleet), *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd or self.root,
            env=self.env(env),
            timeout=timeout_s,
            check=False,
        )

    def run_python(
        self,
        code: str,
        *args: str,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``python -c CODE ARGS`` in this release's venv (import its modules there)."""
        return subprocess.run(
            [str(self.python), "-c", code, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.root,
            env=self.env(env),
            timeout=timeout_s,
            check=False,
        )


def recorded_releases(repository: Path = REPOSITORY) -> list[Release]:
    """Every release in ``releases.toml``, in the order recorded (oldest first)."""
    with (repository / "releases.toml").open("rb") as file:
        record = tomllib.load(file)
    return [Release(str(entry["version"]), str(entry["commit"])) for entry in record["release"]]


def current_version(repository: Path = REPOSITORY) -> str:
    """The version being built: ``project.version`` of ``pyproject.toml``."""
    with (repository / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def previous_release(repository: Path = REPOSITORY) -> Release:
    """The release a cluster may be running when this code arrives: ``$CACHEFLEET_PREVIOUS_RELEASE``
    (a commit-ish) when set, else the latest recorded release that is not the current version."""
    override = os.environ.get(ENV_OVERRIDE, "").strip()
    if override:
        return Release(f"{override} ({ENV_OVERRIDE})", _resolve(override, repository))
    current = current_version(repository)
    earlier = [r for r in recorded_releases(repository) if r.version != current]
    if not earlier:
        raise PreviousReleaseError(f"releases.toml records no release before {current}")
    release = earlier[-1]
    _resolve(release.commit, repository)
    return release


@functools.cache
def checkout_previous_release() -> ReleaseCheckout:
    """The previous release checked out and installed (once per process, reused across runs)."""
    return checkout(previous_release())


def checkout(release: Release, repository: Path = REPOSITORY) -> ReleaseCheckout:
    """Check ``release`` out under ``.cache/releases/`` and install it there, unless a complete
    install at that commit is already there. Safe when several test workers ask at once."""
    home = repository / ".cache" / "releases" / release.commit
    home.parent.mkdir(parents=True, exist_ok=True)
    src, venv = home / "src", home / "venv"
    found = ReleaseCheckout(release, src, venv / "bin" / "python", venv / "bin" / "cachefleet")
    with _locked(home.parent / f"{release.commit}.lock"):
        ready = home / "ready"
        if ready.exists() and _head(src) == release.commit and found.cachefleet.exists():
            return found
        ready.unlink(missing_ok=True)
        _add_worktree(src, release.commit, repository)
        _install(src, venv)
        _check_import(found)
        ready.write_text(release.commit + "\n")
    return found


def _resolve(commit_ish: str, repository: Path) -> str:
    """The full hash of ``commit_ish``, or an error saying how to get it into this clone."""
    found = _git(repository, "rev-parse", "--verify", "--quiet", f"{commit_ish}^{{commit}}")
    if found.returncode != 0:
        shallow = _git(repository, "rev-parse", "--is-shallow-repository").stdout.strip()
        hint = (
            "this clone is shallow: run `git fetch --unshallow` (in CI, check out with the full "
            "history, e.g. actions/checkout's `fetch-depth: 0`)"
            if shallow == "true"
            else "fetch it: `git fetch origin` (or `git fetch origin <commit>`)"
        )
        raise PreviousReleaseError(
            f"the previous release's commit {commit_ish} is not in this clone; {hint}. "
            "The version-skew tests run that release's real code and cannot run without it."
        )
    return found.stdout.strip()


def _add_worktree(src: Path, commit: str, repository: Path) -> None:
    """A detached worktree of ``commit`` at ``src`` (a stale one is removed first)."""
    if src.exists():
        _git(repository, "worktree", "remove", "--force", str(src))
        if src.exists():
            _run(["rm", "-rf", str(src)], "remove a stale checkout")
    _git(repository, "worktree", "prune")
    added = _git(repository, "worktree", "add", "--detach", str(src), commit)
    if added.returncode != 0:
        raise PreviousReleaseError(f"git worktree add {commit} failed:\n{added.stderr}")


def _install(src: Path, venv: Path) -> None:
    """The release installed editable into its own venv with uv (today's venv provides uv)."""
    with (src / "pyproject.toml").open("rb") as file:
        offered = tomllib.load(file)["project"].get("optional-dependencies", {})
    extras = ",".join(extra for extra in WANTED_EXTRAS if extra in offered)
    uv = [sys.executable, "-m", "uv"]
    _run(
        [*uv, "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(venv)],
        "uv venv",
    )
    target = f"{src}[{extras}]" if extras else str(src)
    python = str(venv / "bin" / "python")
    # Byte-compiled, as scripts/setup-dev compiles today's: with PYTHONDONTWRITEBYTECODE set,
    # every process of the release would compile its modules from source again.
    _run(
        [*uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", python, "-e", target],
        "install the previous release (uv pip install)",
    )
    _run([python, "-m", "compileall", "-q", str(src)], "byte-compile the previous release")


def _check_import(found: ReleaseCheckout) -> None:
    """The installed release imports from its own checkout, not from today's tree."""
    probe = found.run_python("import cachefleet.runtime as r; print(r.__file__)")
    where = probe.stdout.strip()
    if probe.returncode != 0 or not where.startswith(str(found.root)):
        raise PreviousReleaseError(
            f"the previous release's install does not import from {found.root}: "
            f"{where or probe.stderr}"
        )


def _head(src: Path) -> str | None:
    if not (src / ".git").exists():
        return None
    head = _git(src, "rev-parse", "HEAD")
    return head.stdout.strip() if head.returncode == 0 else None


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def _run(command: Sequence[str], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env=_without_pythonpath()
    )
    if done.returncode != 0:
        raise PreviousReleaseError(f"{what} failed ({done.returncode}):\n{done.stderr}")


def _without_pythonpath() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONSAFEPATH"] = "1"
    return env


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``: one test worker installs, the others wait and reuse."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
