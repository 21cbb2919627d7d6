import base64
import hashlib
import os
import sys
import zipfile

import pytest

from magnetar_instance import loader


@pytest.fixture(autouse=True)
def clean_imports():
    """Each test imports its own modules; forget them afterwards."""
    before_path, before_mods = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = before_path
    for m in set(sys.modules) - before_mods:
        del sys.modules[m]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return str(path)


EXCLAMATION_CLASS = "from pulsar import Function\nclass Excl(Function):\n    def process(self, input, context):\n        return input + '!'\n"


def test_py_class_module_and_function(tmp_path):
    py = write(tmp_path / "ldr_a.py", EXCLAMATION_CLASS + "def process(input):\n    return input + '?'\n"
               "def with_ctx(input, context):\n    return context\n")
    loader.prepare(py)
    cls = loader.UserFunction(loader.import_object("ldr_a.Excl", py), "ldr_a.Excl")
    assert cls("x", None) == "x!"
    mod = loader.UserFunction(loader.import_object("ldr_a", py), "ldr_a")
    assert mod("x", "ctx") == "x?"
    fn = loader.UserFunction(loader.import_object("ldr_a.process", py), "ldr_a.process")
    assert fn("y", "ctx") == "y?"
    two = loader.UserFunction(loader.import_object("ldr_a.with_ctx", py), "ldr_a.with_ctx")
    assert two("y", "ctx") == "ctx"


def test_renamed_py_file_still_loads(tmp_path):
    py = write(tmp_path / "uploaded-name.py", EXCLAMATION_CLASS)
    loader.prepare(py)
    obj = loader.import_object("ldr_renamed.Excl", py, load_file_as_module=True)
    assert loader.UserFunction(obj, "ldr_renamed.Excl")("a", None) == "a!"


def test_missing_things_are_load_errors(tmp_path):
    py = write(tmp_path / "ldr_b.py", "X = 1\n")
    loader.prepare(py)
    with pytest.raises(loader.LoadError, match="no attribute Nope"):
        loader.import_object("ldr_b.Nope", py)
    with pytest.raises(loader.LoadError, match="not found"):
        loader.import_object("ldr_nowhere.C", py)
    with pytest.raises(loader.LoadError):
        loader.UserFunction(loader.import_object("ldr_b.X", py), "ldr_b.X")
    with pytest.raises(loader.LoadError, match="does not exist"):
        loader.prepare(str(tmp_path / "absent.py"))


def test_user_module_missing_dependency_is_not_hidden(tmp_path):
    py = write(tmp_path / "ldr_c.py", "import ldr_not_installed_dep\n")
    loader.prepare(py)
    with pytest.raises(ModuleNotFoundError, match="ldr_not_installed_dep"):
        loader.import_object("ldr_c.C", py)


def test_serdes(tmp_path):
    py = write(tmp_path / "ldr_serde.py", "class Upper:\n    def serialize(self, v):\n        return v.upper().encode()\n"
               "    def deserialize(self, b):\n        return b.decode().upper()\n")
    loader.prepare(py)
    ident = loader.load_serde("serde.IdentitySerDe", py)
    assert ident.deserialize(b"abc") == "abc" and ident.deserialize(b"12") == 12
    assert ident.serialize("x!") == b"x!"
    pickle = loader.load_serde("serde.PickleSerDe", py)
    assert pickle.deserialize(pickle.serialize({"a": 1})) == {"a": 1}
    assert loader.load_serde("pulsar.functions.serde.PickleSerDe", py).serialize(1)
    assert loader.load_serde("ldr_serde.Upper", py).deserialize(b"q") == "Q"


def make_wheel(dest_dir, name, version, files):
    """A minimal pure-Python wheel holding files {path: text}."""
    dist = "%s-%s" % (name, version)
    path = os.path.join(dest_dir, "%s-py3-none-any.whl" % dist)
    entries = dict(files)
    entries["%s.dist-info/METADATA" % dist] = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
    entries["%s.dist-info/WHEEL" % dist] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for p, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (p, digest, len(text.encode())))
    record.append("%s.dist-info/RECORD,," % dist)
    entries["%s.dist-info/RECORD" % dist] = "\n".join(record) + "\n"
    os.makedirs(dest_dir, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for p, text in entries.items():
            z.writestr(p, text)
    return path


def test_zip_in_pulsar_layout_installs_bundled_deps_offline(tmp_path):
    build = tmp_path / "build"
    make_wheel(str(build / "wcfunc" / "deps"), "ldrdep", "1.0", {"ldrdep.py": "SUFFIX = '#'\n"})
    write(build / "wcfunc" / "requirements.txt", "ldrdep==1.0\n")
    write(build / "wcfunc" / "src" / "ldr_zipped.py",
          "import ldrdep\ndef process(input):\n    return input + ldrdep.SUFFIX\n")
    zpath = tmp_path / "pkg" / "wcfunc.zip"
    os.makedirs(zpath.parent)
    with zipfile.ZipFile(zpath, "w") as z:
        for root, _, names in os.walk(build):
            for n in names:
                full = os.path.join(root, n)
                z.write(full, os.path.relpath(full, build))
    dirs = loader.prepare(str(zpath))
    assert any(d.endswith(os.path.join("wcfunc", "src")) for d in dirs)
    fn = loader.UserFunction(loader.import_object("ldr_zipped", str(zpath)), "ldr_zipped")
    assert fn("a", None) == "a#"
    # Idempotent: a second prepare reuses the extraction and the install.
    assert loader.prepare(str(zpath)) == dirs
    assert len([e for e in os.listdir(zpath.parent) if e.startswith(".wcfunc.zip")]) == 2


def test_flat_zip(tmp_path):
    zpath = tmp_path / "flat.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("ldr_flat.py", "def process(i):\n    return i * 2\n")
    loader.prepare(str(zpath))
    assert loader.UserFunction(loader.import_object("ldr_flat", str(zpath)), "ldr_flat")(3, None) == 6


def test_zip_slip_is_refused(tmp_path):
    zpath = tmp_path / "evil.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("../../escaped.py", "x = 1\n")
    with pytest.raises(loader.LoadError, match="escapes"):
        loader.prepare(str(zpath))


def test_wheel_package(tmp_path):
    whl = make_wheel(str(tmp_path), "ldrwheel", "0.1", {
        "ldrwheel/__init__.py": "",
        "ldrwheel/fn.py": EXCLAMATION_CLASS,
    })
    dirs = loader.prepare(whl)
    assert os.path.isdir(os.path.join(dirs[0], "ldrwheel"))
    fn = loader.UserFunction(loader.import_object("ldrwheel.fn.Excl", whl), "ldrwheel.fn.Excl")
    assert fn("w", None) == "w!"
