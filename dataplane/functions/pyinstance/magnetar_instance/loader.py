"""Loading the user's code: the --py package and the classes it names.

Packages, chosen by file extension (the worker keeps the uploaded name):

``.py``  the file's directory goes on sys.path.
``.zip`` extracted once, into a directory beside the zip named by the
         archive's content hash (a temporary directory and a rename, so
         concurrent instances and re-uploads never mix files). Pulsar's
         layout ``<name>/src``, ``<name>/requirements.txt``,
         ``<name>/deps/*.whl`` is understood, as are flat archives. Bundled
         dependencies are installed with ``pip install --no-index
         --find-links <deps>`` (of requirements.txt when present, else of
         every archive in deps/) into a private directory on sys.path; a
         requirements.txt without deps/ is installed from the index only
         with --install_usercode_dependencies true.
``.whl`` ``pip install --no-deps`` into a private directory (with its
         dependencies when --install_usercode_dependencies is true).

Class names are ``module.Attr`` or a bare ``module``; ``serde.X`` names a
serde of the pulsar.functions.serde module when the user's code has no
``serde`` module of its own.
"""

import importlib
import importlib.util
import inspect
import logging
import os
import sys

# hashlib, shutil, subprocess, tempfile and zipfile are imported only for
# .zip and .whl packages: hashlib alone maps libcrypto (about 3 MB resident).

log = logging.getLogger(__name__)


class LoadError(Exception):
    """The user's package or class could not be loaded."""


def prepare(path, install_dependencies=False, index_url=None, extra_index_url=None):
    """Makes the package at path importable and returns the directories
    put at the front of sys.path (highest priority first)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise LoadError("function package %s does not exist" % path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".zip":
        dirs = _prepare_zip(path, install_dependencies, index_url, extra_index_url)
    elif ext == ".whl":
        dirs = [_pip_target(path, "whl", _pip_args(
            [path] if install_dependencies else ["--no-deps", path],
            index_url if install_dependencies else None, extra_index_url if install_dependencies else None))]
    else:
        dirs = [os.path.dirname(path)]
    for d in reversed(dirs):
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    importlib.invalidate_caches()
    return dirs


def import_object(name, package_path=None, load_file_as_module=False):
    """Imports ``module.Attr`` (the attribute) or ``module`` (the module).

    With load_file_as_module, when the module is not found and package_path
    is a .py file, the file itself is loaded under the module's name, so a
    function still loads when the uploaded file was renamed.
    """
    if not name:
        raise LoadError("no class name given")
    fallback = package_path if load_file_as_module else None
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        return _import_module(name, fallback)
    try:
        mod = _import_module(module_name, fallback)
    except LoadError:
        # "pkg.module" naming a module rather than module.Attr.
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
        raise
    try:
        return getattr(mod, attr)
    except AttributeError:
        try:
            return importlib.import_module(name)
        except ImportError:
            origin = getattr(mod, "__file__", None)
            raise LoadError("module %s (%s) has no attribute %s" % (module_name, origin, attr)) from None


def _import_module(module_name, package_path):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name.split(".")[0] and e.name != module_name:
            raise  # the user's module exists but one of its imports is missing
        if package_path and package_path.endswith(".py") and "." not in module_name:
            spec = importlib.util.spec_from_file_location(module_name, package_path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                del sys.modules[module_name]
                raise
            return mod
        raise LoadError("module %s not found (sys.path starts %s)" % (module_name, sys.path[:3])) from None


def load_serde(class_name, package_path=None):
    """An instance of the serde class_name (``serde.IdentitySerDe`` etc.)."""
    if class_name.startswith("serde.") and class_name.count(".") == 1:
        try:
            cls = import_object(class_name, package_path)
        except (LoadError, ImportError):
            from pulsar.functions import serde as api_serde
            attr = class_name.split(".", 1)[1]
            if not hasattr(api_serde, attr):
                raise LoadError("serde %s not found" % class_name) from None
            cls = getattr(api_serde, attr)
    else:
        cls = import_object(class_name, package_path)
    return cls() if inspect.isclass(cls) else cls


class UserFunction:
    """Calls the user's code the way Pulsar's Python instance does:

    * a class (pulsar.Function or any class with process): instantiated
      once, then ``obj.process(input, context)``;
    * a module: ``module.process(input)``;
    * a plain function: ``f(input)``, or ``f(input, context)`` when it
      takes two positional parameters.
    """

    def __init__(self, obj, name):
        self.name = name
        if inspect.isclass(obj):
            inst = obj()
            if not callable(getattr(inst, "process", None)):
                raise LoadError("%s has no process(input, context) method" % name)
            self._call = inst.process
            self._with_context = True
        elif inspect.ismodule(obj):
            if not callable(getattr(obj, "process", None)):
                raise LoadError("module %s has no process(input) function" % name)
            self._call = obj.process
            self._with_context = _positional_count(obj.process) >= 2
        elif callable(obj):
            self._call = obj
            self._with_context = _positional_count(obj) >= 2
        else:
            raise LoadError("%s is neither a class nor a function" % name)

    def __call__(self, value, context):
        if self._with_context:
            return self._call(value, context)
        return self._call(value)


def _positional_count(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


# --- packages ------------------------------------------------------------

def _digest(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _work_dir(path, suffix):
    """A directory beside path (or in the temp dir when that is read-only)
    named by path's content, for what is made from it."""
    import tempfile

    base = ".%s.%s-%s" % (os.path.basename(path), suffix, _digest(path))
    parent = os.path.dirname(path)
    if not os.access(parent, os.W_OK):
        parent = tempfile.gettempdir()
    return os.path.join(parent, base)


def _publish(tmp, final):
    """Renames tmp to final; when another instance got there first, keeps
    theirs."""
    import shutil

    try:
        os.rename(tmp, final)
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _prepare_zip(path, install_dependencies, index_url, extra_index_url):
    import shutil
    import tempfile
    import zipfile

    root = _work_dir(path, "d")
    if not os.path.isdir(root):
        tmp = tempfile.mkdtemp(prefix=".extract-", dir=os.path.dirname(root))
        try:
            with zipfile.ZipFile(path) as zf:
                _safe_extract(zf, tmp)
        except zipfile.BadZipFile as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise LoadError("%s is not a valid zip: %s" % (path, e)) from None
        _publish(tmp, root)
    stem = os.path.splitext(os.path.basename(path))[0]
    tops = [os.path.join(root, stem)]
    entries = [e for e in os.listdir(root) if not e.startswith((".", "__MACOSX"))]
    if len(entries) == 1 and os.path.isdir(os.path.join(root, entries[0])):
        tops.append(os.path.join(root, entries[0]))
    tops.append(root)
    code_dirs = []
    for top in tops:
        for d in (os.path.join(top, "src"), top):
            if os.path.isdir(d) and d not in code_dirs:
                code_dirs.append(d)
    top = next((t for t in tops if os.path.isdir(t)), root)
    deps = os.path.join(top, "deps")
    reqs = os.path.join(top, "requirements.txt")
    has_deps = os.path.isdir(deps) and any(
        e.endswith((".whl", ".tar.gz", ".zip", ".tar.bz2")) for e in os.listdir(deps))
    dep_dir = None
    if has_deps:
        wanted = ["-r", reqs] if os.path.isfile(reqs) else sorted(
            os.path.join(deps, e) for e in os.listdir(deps) if e.endswith((".whl", ".tar.gz", ".zip", ".tar.bz2")))
        dep_dir = _pip_target(path, "deps", ["--no-index", "--find-links", deps] + wanted)
    elif os.path.isfile(reqs):
        if install_dependencies:
            dep_dir = _pip_target(path, "deps", _pip_args(["-r", reqs], index_url, extra_index_url))
        else:
            log.warning("%s has requirements.txt but no deps/ directory and --install_usercode_dependencies "
                        "is not true: its requirements are not installed", path)
    return code_dirs + ([dep_dir] if dep_dir else [])


def _pip_args(wanted, index_url, extra_index_url):
    args = []
    if index_url:
        args += ["--index-url", index_url]
    if extra_index_url:
        args += ["--extra-index-url", extra_index_url]
    return args + wanted


def _pip_target(path, suffix, pip_args):
    """Runs pip install --target into a content-named directory beside
    path once, and returns that directory."""
    import shutil
    import subprocess
    import tempfile

    final = _work_dir(path, suffix)
    if os.path.isdir(final):
        return final
    tmp = tempfile.mkdtemp(prefix=".pip-", dir=os.path.dirname(final))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-warn-script-location", "--no-input", "--target", tmp] + pip_args
    log.info("installing dependencies: %s", " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise LoadError("pip install for %s failed (exit %d):\n%s" % (os.path.basename(path), proc.returncode, tail))
    _publish(tmp, final)
    return final


def _safe_extract(zf, dest):
    dest_real = os.path.realpath(dest)
    for info in zf.infolist():
        target = os.path.realpath(os.path.join(dest, info.filename))
        if target != dest_real and not target.startswith(dest_real + os.sep):
            raise LoadError("zip entry %r escapes the extraction directory" % info.filename)
    zf.extractall(dest)
