"""The PEP 517 backend of `pip install .` (pyproject.toml): the wheel of the distribution
`mstar-c` is built by the project's own CMake build, offline and with nothing beyond the
standard library, so Debian's pip (and `python3 -m build --no-isolation --wheel`) can build it
with no build dependency to fetch.

build_wheel configures the checkout into build/wheel (-DMSTAR_BUILD_TESTS=OFF, CUDA as the build
finds it; MSTAR_WHEEL_CMAKE_ARGS adds options), builds the Python package, installs it into a
staging prefix whose library folder is the package's own folder, and zips that folder into a
wheel tagged for CPython's stable ABI (cp311-abi3): mstar_c/*.py, _mstar.abi3.so, and libmstar's
shared object beside it (the extension finds it through its $ORIGIN run path), with the
dist-info that pip show and pip uninstall read.
"""
import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

NAME = "mstar-c"
DIST = "mstar_c"
SUMMARY = ("mstar-c's tensor transport and control mesh for Python serving loops "
           "(import mstar_c)")


def _source():
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _version():
    with open(os.path.join(_source(), "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(mstar VERSION ([0-9.]+)", f.read()).group(1)


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-abi3-{plat}"


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            f"Summary: {SUMMARY}\nRequires-Python: >=3.11\nLicense: see the project\n")


def _run(cmd):
    print("mstar_build:", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def _build_package(stage):
    """Build with CMake and install the package into `stage`: (build folder, package folder)."""
    src = _source()
    build = os.path.join(src, "build", "wheel")
    args = ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DMSTAR_BUILD_TESTS=OFF", "-DMSTAR_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            # the package and libmstar in one folder: the run path is $ORIGIN
            "-DMSTAR_PYTHON_INSTALL_DIR=wheel", "-DCMAKE_INSTALL_LIBDIR=wheel/mstar_c"]
    if shutil.which("ccache"):
        args.append("-DCMAKE_C_COMPILER_LAUNCHER=ccache")
    args += shlex.split(os.environ.get("MSTAR_WHEEL_CMAKE_ARGS", ""))
    _run(["cmake", "-S", src, "-B", build] + args)
    _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", "mstar",
          "mstar_python", "--", "--no-print-directory"])
    _run(["cmake", "--install", build, "--prefix", stage, "--component", "python"])
    return build, os.path.join(stage, "wheel", DIST)


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    stage = os.path.join(_source(), "build", "wheel-stage")
    shutil.rmtree(stage, ignore_errors=True)
    build, pkg = _build_package(stage)
    files = {}
    for name in sorted(os.listdir(pkg)):
        path = os.path.join(pkg, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            files[f"{DIST}/{name}"] = f.read()
    if f"{DIST}/_mstar.abi3.so" not in files:
        raise RuntimeError("mstar_build: the extension was not built (python3-dev missing?)")
    with open(os.path.join(build, "libmstar.so.0"), "rb") as f:  # the library's SONAME
        files[f"{DIST}/libmstar.so.0"] = f.read()
    info = f"{DIST}-{_version()}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: mstar_build\n"
                              f"Root-Is-Purelib: false\nTag: {_tag()}\n").encode()
    files[f"{info}/top_level.txt"] = f"{DIST}\n".encode()
    record = [_record_line(arc, data) for arc, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{DIST}-{_version()}-{_tag()}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if arc.endswith(".so") or ".so." in arc else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    shutil.rmtree(stage, ignore_errors=True)
    return wheel
