"""The ``most`` application: the root command, its ``bench`` and ``flower`` groups, and how a
command reports a user's error (one line on stderr and exit code 2, or the traceback with
``most --debug``). The commands register themselves on :data:`app`, :data:`bench_app` and
:data:`flower_app` from the package's other modules.
"""

from __future__ import annotations

import functools
import json
import os
import re
import warnings
from pathlib import Path

import click
import typer
import typer.core


class Failure(Exception):
    """A user's error found by a command: its message (shown as one line) and exit code.

    Args:
        message: what is wrong and what to do, shown as one line.
        code: the exit code (2: the user's to fix).
    """

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def set_threads(threads: int) -> None:
    """``torch.set_num_threads``, refusing a count far above the machine's cores (100000 threads
    exhaust the process instead of running)."""
    import os

    import torch

    limit = max(8, 4 * (os.cpu_count() or 1))
    if threads > limit:
        raise Failure(f"--threads {threads}: this machine has {os.cpu_count()} cores; use at most {limit} "
                      "(more threads than cores only slow the run down).")
    torch.set_num_threads(threads)


def out_folder(out: Path | None, option: str = "--out") -> None:
    """Refuses an output path that exists and is not a folder, before any work."""
    if out is not None and out.exists() and not out.is_dir():
        raise Failure(f"{option} {out} is a file, not a folder; choose a folder (it is created if missing).")
    if out is not None and out.is_symlink() and not out.exists():
        raise Failure(f"{option} {out} is a symbolic link to {os.readlink(out)}, which does not exist; create that "
                      "folder, or choose another.")


def _user_error(exc: Exception) -> tuple[str, int] | None:
    """The one-line message and exit code of a user's error (a bad file, value or folder), or
    None for an error that is a bug (shown with its traceback). The one place that decides."""
    if isinstance(exc, Failure):
        return str(exc), exc.code
    if isinstance(exc, json.JSONDecodeError):  # the store names its own files (CorruptFileError)
        return (f"a JSON file this command read is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                f"{exc.colno}); run `most --debug ...` to see which file."), 2
    if isinstance(exc, UnicodeDecodeError):
        return (f"a file this command read is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                "run `most --debug ...` to see which file."), 2
    if isinstance(exc, (ValueError, TypeError)):  # ConfigError and the store's CorruptFileError among them
        return str(exc) or type(exc).__name__, 2
    if isinstance(exc, OSError) and exc.strerror:  # read-only, no space, name too long, ...: the path and the cause
        return _os_error(exc), 2
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)):
        return str(exc), 2  # the library's own, with its message
    if isinstance(exc, ImportError):  # an extra that is not installed
        return str(exc), 2
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "allocate" in str(exc)
                                        and ("memory" in str(exc) or "Allocator" in str(exc))):
        detail = " ".join(str(exc).split())[:160]  # a bare MemoryError has no text
        return ("out of memory: the sizes asked for need more memory than this machine has"
                + (f" ({detail})" if detail else "") + "; make the problem, data or number of models smaller."), 2
    if type(exc).__name__ == "InterruptedRunsError":  # most.experiments (not imported for other commands)
        return str(exc), 2
    return None


def _os_error(exc: OSError) -> str:
    """One line for an operating system's refusal: what it refused, the path, and what to do."""
    import errno

    path = exc.filename if exc.filename is not None else "a file or folder"
    hints: dict[int | None, str] = {  # exc.errno may be None: no hint then
        errno.ENOSPC: "free some space or write to another --out",
        errno.EROFS: "the file system is read-only: write to another --out",
        errno.ENAMETOOLONG: "a name in the path is too long for the file system: shorten the experiment "
                            "name, the method labels or --out",
        errno.EACCES: "this user may not write there: write to another --out or change the permissions",
        errno.EPERM: "this user may not write there: write to another --out or change the permissions",
        errno.EDQUOT: "the disk quota is used up: free some space or write to another --out",
        errno.EFBIG: "the file is larger than this process may write (`ulimit -f`): raise the limit or write to "
                     "another --out"}
    hint = hints.get(exc.errno, "check the path")
    return f"{exc.strerror}: {path} ({hint})."


def _debug() -> bool:
    """Whether the command line asked for ``most --debug`` (tracebacks instead of one line)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("debug"))


def _guarded(command):
    """``command`` with a user's error shown as one line on stderr and a non-zero exit (unless
    ``most --debug``, which shows the traceback)."""
    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            found = _user_error(exc)
            if found is None or _debug():
                raise
            message, code = found
            typer.echo("Error: " + " ".join(message.split()), err=True)
            raise typer.Exit(code) from None

    return guarded


class _Group(typer.core.TyperGroup):
    """The root command: a mistake in the command line itself (an unknown option, a value out of
    range, a missing argument), which click finds before any command runs, is one line too."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        import sys

        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `most bench`: the help is printed already
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" See `{ctx.command_path} --help`." if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            # click (8.2 on) and typer both append "Did you mean 'x'?" to an unknown command: say it once
            message = re.sub(r"( Did you mean [^?]*\?)(?:\1)+", r"\1", message)
            typer.echo("Error: " + message + hint, err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an Exit's code; a command returns None


class _Typer(typer.Typer):
    """A Typer app whose commands report a user's error in one line (:func:`_guarded`), and whose
    tracebacks (bugs, or --debug) leave out the local variables, which can run to thousands of lines."""

    def __init__(self, **kwargs):
        super().__init__(pretty_exceptions_show_locals=False, **kwargs)

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def decorator(fn):
            register(_guarded(fn))
            return fn

        return decorator


app = _Typer(cls=_Group, add_completion=False, no_args_is_help=True)  # help: the callback's docstring


bench_app = _Typer(no_args_is_help=True, help="Benchmark suites that reproduce the paper's tables.")
app.add_typer(bench_app, name="bench")
flower_app = _Typer(no_args_is_help=True, help="Deployment on Flower (needs the extra most-transport\\[flower]).")
app.add_typer(flower_app, name="flower")


def _version(value: bool) -> None:
    """``most --version``: prints the version and exits."""
    if value:
        from .. import __version__

        typer.echo(f"most {__version__}")
        raise typer.Exit()


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error (to report a bug); "
                                     "without it, a mistake in a file or an option is one line."),
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """MosT: train a few models that together serve many objectives.

    Examples:

        most demo

        most run examples/synthetic.toml && most report results/synthetic && most plot results/synthetic

        most bench federated --rho 0 0
    """
    if not debug:  # a warning for the user is one line, without the file and source line it was raised at
        warnings.formatwarning = _one_line_warning
        warnings.showwarning = _once_per_command(warnings.showwarning)
    else:  # every warning, as Python shows it (an earlier command of this process may have set the above)
        warnings.showwarning = getattr(warnings.showwarning, "__wrapped__", warnings.showwarning)
        if warnings.formatwarning is _one_line_warning:
            warnings.formatwarning = _FORMAT_WARNING


#: Python's own warning format, which --debug keeps
_FORMAT_WARNING = warnings.formatwarning


def _once_per_command(show):
    """``warnings.showwarning`` that shows each warning's text once in a command: the checks made
    before the runs and the runs themselves raise the same warning from two places."""
    base = getattr(show, "__wrapped__", show)  # a wrapper of an earlier command is replaced, not wrapped again
    seen: set[tuple[type, str]] = set()

    def once(message, category, filename, lineno, file=None, line=None):
        key = (category, str(message))
        if key not in seen:
            seen.add(key)
            base(message, category, filename, lineno, file, line)

    once.__wrapped__ = base
    return once


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line, without the file and source line it was raised at (``warnings.formatwarning``)."""
    return f"Warning: {' '.join(str(message).split())}\n"
