"""Serve a trainable from submitted code: ``python3 -m ztune.entry FILE:NAME``.

A spec may name a trainable in code the client uploads, instead of a program
in the worker's configuration (like Ray's ``working_dir``)::

    "trainable": {"python": "train.py:train"}

The worker unpacks the uploaded project directory into its cache and starts,
for each actor::

    python3 -m ztune.entry train.py:train

with ``ZTUNE_CODE_DIR=<the unpacked project directory>`` in the environment
(besides the protocol variables of docs/process-protocol.md) and the trial's
directory as the working directory. This module then does what the user's
``if __name__ == "__main__": ztune.run(train)`` would do:

* ``FILE`` is a path relative to ``$ZTUNE_CODE_DIR`` ending in ``.py``.
  Absolute paths, ``..`` components and symbolic links that lead outside the
  code directory are refused: the spec chooses code of the uploaded project,
  never another file on the worker.
* ``$ZTUNE_CODE_DIR`` goes first on ``sys.path`` (in place of the working
  directory that ``python3 -m`` puts there), so the project's own modules
  import as they do when the user runs the script from the project root.
* The file is imported as a module, never as ``__main__``, so the user's
  ``if __name__ == "__main__":`` block does not run a second command loop. A
  file that maps to a module name (``train.py`` -> ``train``,
  ``pkg/train.py`` -> ``pkg.train`` when ``pkg/__init__.py`` exists) is
  imported by that name, so that pickling by reference and relative imports
  work; any other file (``my-scripts/train.py``) is loaded from its path
  under a derived name (``_ztune_code_my_scripts_train``), with its own
  directory also on ``sys.path`` (as ``python3 my-scripts/train.py`` would
  have it). ``sys.argv`` becomes ``[<path of FILE>]``, as for the script.
* ``NAME`` (an identifier, or a dotted path like ``Outer.Inner`` resolved
  attribute by attribute) must be a ``ztune.Trainable`` subclass or a
  function; it is passed to ``ztune.run``.

Why the working directory is the trial's directory and not the code
directory: the code directory is shared, read-mostly, by every trial the
worker runs from the same upload (possibly at the same time), while each
trial writes its own files (logs, checkpoints, outputs) relative to its
working directory. (Python may add ``__pycache__`` directories to the code
directory, written atomically; set PYTHONDONTWRITEBYTECODE or
PYTHONPYCACHEPREFIX to avoid that.)

Every failure before ``ztune.run`` takes over (no ``ZTUNE_CODE_DIR``, a bad
``FILE:NAME``, a missing file, an import that raises, a missing or
unsuitable attribute) is written to stderr and then served as the error of
the worker's ``setup`` command, whose text starts with ``ztune.entry: ``: a
process that died before its hello line would leave the user only the last
lines of stderr, while a failed setup shows the whole reason in the trial's
error. When the process was not started by a worker, ``ztune.run`` exits
with status 2 and its message, as it does for a script (so running the
command by hand checks that FILE:NAME resolves).
"""

import difflib
import importlib
import importlib.util
import keyword
import os
import re
import sys
import traceback
from types import ModuleType, TracebackType
from typing import Any, List, NoReturn, Optional, Tuple

from . import runner
from .errors import CommandError
from .trainable import Trainable

_PREFIX = "ztune.entry: "
_CODE_DIR_VAR = "ZTUNE_CODE_DIR"
_USAGE = "usage: python3 -m ztune.entry FILE:NAME (e.g. train.py:train), " \
         "with %s naming the project directory" % _CODE_DIR_VAR

# Frames of this package and of the import machinery lead every traceback of
# an import that failed; the user needs only the frames of their own code.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_IMPORTLIB_DIR = os.path.dirname(os.path.abspath(importlib.__file__))

# The prefix of the fallback module names (files outside any package path).
_DERIVED_PREFIX = "_ztune_code_"


class EntryError(Exception):
    """A failure before ztune.run: the message is the whole setup error."""

    def __init__(self, message: str) -> None:
        super().__init__(_PREFIX + message)


class _RunDuringImport(BaseException):
    """Raised by ztune.run when the user's module calls it while being imported.

    A BaseException so that the user's ``except Exception`` does not swallow
    it.
    """


def main() -> None:
    try:
        trainable = _load(sys.argv[1:])
    except EntryError as e:
        _serve_error(str(e))
    except Exception as e:
        # A bug of this module: still a setup error, with the whole
        # traceback (describe_exception would leave out the SDK's frames).
        _serve_error(_PREFIX + "internal error: %s\n%s"
                     % (_headline(e), traceback.format_exc().rstrip("\n")))
    runner.run(trainable)


def _serve_error(message: str) -> NoReturn:
    """Report ``message`` on stderr and as the error of the setup; never returns."""
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass

    class EntryFailed(Trainable):
        def setup(self, config: Any) -> None:
            # CommandError: the reply is exactly the message, with no
            # traceback of the SDK's frames.
            raise CommandError(message)

    # run() writes the hello line, answers setup with the error and exits
    # after stop; not under a worker it exits 2 with its own message.
    runner.run(EntryFailed)
    raise AssertionError("ztune.run returned")   # it never does


# -- FILE:NAME ---------------------------------------------------------------

def _load(args: List[str]) -> Any:
    """The object that FILE:NAME in ``args`` names, or EntryError."""
    if len(args) != 1:
        raise EntryError("expected exactly one argument FILE:NAME, got %d (%s); %s"
                         % (len(args), " ".join(repr(a) for a in args) or "none", _USAGE))
    spec = args[0]
    file_part, colon, name = spec.rpartition(":")
    if not colon or not file_part or not name:
        raise EntryError("%r is not FILE:NAME; %s" % (spec, _USAGE))
    names = name.split(".")
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in names):
        raise EntryError("%s: NAME %r is not a Python identifier or a dotted path "
                         "of identifiers (e.g. train, Model, Outer.Inner)" % (spec, name))

    code_dir = _code_dir()
    parts = _file_parts(spec, file_part)
    path, real = _resolve(spec, file_part, parts, code_dir)

    _set_sys_path(code_dir)
    # What the module would see when run as `python3 FILE`.
    sys.argv = [path]
    module = _import(file_part, parts, path, real, code_dir)
    obj = _attribute(spec, file_part, module, names)
    _check_servable(spec, obj)
    return obj


def _code_dir() -> str:
    value = os.environ.get(_CODE_DIR_VAR)
    if not value:
        raise EntryError("%s is not set; the worker sets it to the directory of the "
                         "uploaded project" % _CODE_DIR_VAR)
    real = os.path.realpath(value)
    if not os.path.isdir(real):
        raise EntryError("%s=%s is not a directory" % (_CODE_DIR_VAR, value))
    return real


def _file_parts(spec: str, file_part: str) -> List[str]:
    """The path components of FILE, checked to stay inside the code directory."""
    if os.path.isabs(file_part):
        raise EntryError("%s: FILE %s is an absolute path; it must be relative to the "
                         "project directory (%s)" % (spec, file_part, _CODE_DIR_VAR))
    parts = [p for p in file_part.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise EntryError("%s: FILE %s has a '..' component; it must name a file inside "
                         "the project directory (%s)" % (spec, file_part, _CODE_DIR_VAR))
    if not parts or not parts[-1].endswith(".py") or parts[-1] == ".py":
        raise EntryError("%s: FILE %s is not a Python file; it must end in .py"
                         % (spec, file_part))
    return parts


def _resolve(spec: str, file_part: str, parts: List[str], code_dir: str) -> Tuple[str, str]:
    """The file's path under the code directory and its real path, or EntryError."""
    path = os.path.join(code_dir, *parts)
    real = os.path.realpath(path)
    # realpath follows every symbolic link on the way: a link to /etc, or a
    # directory link to elsewhere, ends outside code_dir.
    if os.path.commonpath([real, code_dir]) != code_dir:
        raise EntryError("%s: FILE %s leads outside the project directory (through a "
                         "symbolic link); it must name a file of the uploaded project"
                         % (spec, file_part))
    if not os.path.isfile(real):
        what = "is not a regular file" if os.path.exists(real) else "does not exist"
        raise EntryError("%s: FILE %s %s in the project directory %s%s"
                         % (spec, file_part, what, code_dir, _python_files_hint(code_dir)))
    return path, real


def _python_files_hint(code_dir: str) -> str:
    try:
        files = sorted(f for f in os.listdir(code_dir)
                       if f.endswith(".py") and os.path.isfile(os.path.join(code_dir, f)))
    except OSError:
        return ""
    if not files:
        return " (it holds no .py file at its top level)"
    shown = ", ".join(files[:20]) + (", ..." if len(files) > 20 else "")
    return " (its top level holds %s)" % shown


def _set_sys_path(code_dir: str) -> None:
    # `python3 -m` puts the working directory (the trial's directory) first
    # on sys.path: it holds this trial's outputs, not code, and a file
    # written there must not shadow a module. The code directory takes its
    # place, as the script's directory would for `python3 train.py`.
    if not (getattr(sys.flags, "safe_path", False) or sys.flags.isolated) and sys.path:
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = None
        if sys.path[0] in ("", cwd):
            del sys.path[0]
    sys.path.insert(0, code_dir)


# -- import ------------------------------------------------------------------

def _module_name(parts: List[str], code_dir: str) -> Optional[str]:
    """The name FILE imports under from the code directory, or None.

    None when a component is not an identifier, a directory on the way is not
    a regular package, or the top-level name is taken already (a module of
    the standard library or of the SDK, e.g. a project file json.py): then
    importing by name would give the other module.
    """
    names = parts[:-1] + [parts[-1][:-len(".py")]]
    if names[-1] == "__init__":
        names = names[:-1]   # pkg/__init__.py is the package pkg itself
    if not names or not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
        return None
    for i in range(1, len(parts)):
        if not os.path.isfile(os.path.join(code_dir, *parts[:i], "__init__.py")):
            return None
    top = names[0]
    if top in sys.modules or top in sys.builtin_module_names:
        return None
    return ".".join(names)


def _derived_name(parts: List[str]) -> str:
    # No dots: a dot would make the import system look for a parent package.
    stem = "_".join(parts)[:-len(".py")]
    return _DERIVED_PREFIX + re.sub(r"\W", "_", stem)


def _import(file_part: str, parts: List[str], path: str, real: str,
            code_dir: str) -> ModuleType:
    name = _module_name(parts, code_dir)
    what = "%s (module %s)" % (file_part, name) if name else file_part
    guard = _RunGuard()
    try:
        with guard:
            if name is not None:
                module = importlib.import_module(name)
            else:
                module = _import_from_path(parts, path, code_dir)
    except _RunDuringImport as e:
        raise EntryError(
            "%s calls ztune.run() while it is imported%s; ztune.entry imports the "
            "module and serves the object the spec names, so put the call under "
            "`if __name__ == \"__main__\":`" % (file_part, _user_location(e))) from None
    except (Exception, SystemExit) as e:
        raise EntryError("cannot import %s: %s" % (what, _describe_import_failure(e, code_dir))) \
            from None
    loaded = getattr(module, "__file__", None)
    if not loaded or os.path.realpath(loaded) != real:
        # A meta path hook or a frozen module answered to the name.
        raise EntryError("importing %s gave the module at %s, not the file of the "
                         "project; rename the file" % (what, loaded or "(no file)"))
    return module


def _import_from_path(parts: List[str], path: str, code_dir: str) -> ModuleType:
    # The file's own directory also goes on sys.path (after the code
    # directory), as for `python3 dir/train.py`: its sibling modules import.
    directory = os.path.dirname(path)
    if directory != code_dir and directory not in sys.path:
        sys.path.insert(1, directory)
    name = _derived_name(parts)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("no loader for %s" % path)
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import does: dataclasses, pickle and
    # typing look the module up by name while it executes.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class _RunGuard:
    """Makes ztune.run raise _RunDuringImport while the user's module is imported.

    Without this a module that calls ztune.run() at its top level would
    serve the whole trial from inside the import (ignoring NAME), and its
    final sys.exit would look like a failed import.
    """

    def __init__(self) -> None:
        self.active = False

    def __enter__(self) -> "_RunGuard":
        import ztune  # the package object, whose `run` the user's code reads
        self._package = ztune
        self._real = runner.run
        real, guard = self._real, self

        def run(trainable: Any) -> None:
            if guard.active:
                raise _RunDuringImport()
            # Called later (the module kept a reference): the real thing.
            real(trainable)

        run.__doc__ = real.__doc__
        self.active = True
        ztune.run = run
        runner.run = run
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False
        self._package.run = self._real
        runner.run = self._real


def _is_machinery(filename: str) -> bool:
    if filename.startswith("<frozen importlib"):
        return True
    directory = os.path.dirname(os.path.abspath(filename))
    return directory in (_PACKAGE_DIR, _IMPORTLIB_DIR)


def _user_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    while tb is not None and _is_machinery(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _user_location(exc: BaseException) -> str:
    last = None
    tb = exc.__traceback__
    while tb is not None:
        if not _is_machinery(tb.tb_frame.f_code.co_filename):
            last = tb
        tb = tb.tb_next
    if last is None:
        return ""
    return " (%s, line %d)" % (last.tb_frame.f_code.co_filename, last.tb_lineno)


def _describe_import_failure(exc: BaseException, code_dir: str) -> str:
    """``<Type>: <message>``, a hint, then the traceback of the user's frames."""
    if isinstance(exc, SyntaxError):
        # str() of a SyntaxError names the file and line; the formatted
        # exception below shows the line and the caret.
        headline = "%s: %s" % (type(exc).__name__, exc)
    else:
        headline = traceback.format_exception_only(type(exc), exc)[-1].rstrip("\n")
    if isinstance(exc, ModuleNotFoundError):
        headline += (" (the project directory %s is first on sys.path; is the module "
                     "part of the upload, or installed on the worker?)" % code_dir)
    elif isinstance(exc, SystemExit):
        headline += " (the module exited while it was imported)"
    tb = _user_frames(exc.__traceback__)
    body = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")
    return headline + "\n" + body


# -- NAME --------------------------------------------------------------------

def _attribute(spec: str, file_part: str, module: ModuleType, names: List[str]) -> Any:
    obj: Any = module
    for i, part in enumerate(names):
        owner = file_part if i == 0 else "%s:%s" % (file_part, ".".join(names[:i]))
        try:
            obj_next = getattr(obj, part)
        except AttributeError:
            raise EntryError("%s: %s has no attribute %r; %s"
                             % (spec, owner, part, _defined_hint(obj, part))) from None
        except Exception as e:
            raise EntryError("%s: getting %s from %s raised %s"
                             % (spec, part, owner, _headline(e))) from None
        obj = obj_next
    return obj


def _defined_hint(obj: Any, missing: str) -> str:
    """The public functions and classes ``obj`` defines, with a guess."""
    if isinstance(obj, ModuleType):
        # Only what the module defines itself, not what it imports.
        candidates = [(n, v) for n, v in vars(obj).items()
                      if getattr(v, "__module__", None) == obj.__name__]
    elif isinstance(obj, type):
        candidates = list(vars(obj).items())
    else:
        candidates = [(n, getattr(obj, n, None)) for n in dir(obj)]
    names = sorted(n for n, v in candidates if not n.startswith("_") and callable(v))
    if not names:
        return "it defines no public functions or classes"
    text = "it defines %s" % ", ".join(names)
    close = difflib.get_close_matches(missing, names, n=1)
    if close:
        text += " (did you mean %r?)" % close[0]
    return text


def _check_servable(spec: str, obj: Any) -> None:
    """EntryError unless ztune.run accepts ``obj`` (see runner._trainable_class)."""
    if isinstance(obj, type):
        if not issubclass(obj, Trainable):
            raise EntryError("%s is a class that does not derive from ztune.Trainable; "
                             "name a ztune.Trainable subclass or a function f(config)"
                             % spec)
    elif isinstance(obj, Trainable):
        raise EntryError("%s is an instance of %s; name the class itself, not an instance"
                         % (spec, type(obj).__name__))
    elif not callable(obj):
        raise EntryError("%s is %s, not a ztune.Trainable subclass or a function "
                         "f(config)" % (spec, _a_type(obj)))
    try:
        runner._trainable_class(obj)
    except TypeError as e:
        # The SDK's own rule, should it ever be stricter than the checks above.
        raise EntryError("%s cannot be served: %s" % (spec, e)) from None


def _a_type(value: Any) -> str:
    if value is None:
        return "None"
    return "a %s" % type(value).__name__


def _headline(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].rstrip("\n")


if __name__ == "__main__":
    # Guarded: a multiprocessing "spawn" child re-imports the main module as
    # __mp_main__, and must not start a second command loop.
    main()
