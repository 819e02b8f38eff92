#!/bin/sh
# CTest python.pip_install: the README's `pip install .`, offline, as a new user runs it. The
# checkout's files (tracked and new, as git lists them) are copied into a scratch folder, a fresh
# venv over Debian's Python (--system-site-packages, for torch and NumPy) installs the copy with
# pip --no-build-isolation --no-index (python/build_backend drives the CMake build), then
# `import mstar_c` and python/examples/arena_workers.py run against the installed package, and
# `pip uninstall -y mstar-c` must leave nothing of it in the venv.
set -eu
src=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/src"
(cd "$src" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$scratch/src"
/usr/bin/python3 -m venv --system-site-packages "$scratch/venv"
py="$scratch/venv/bin/python"
(cd "$scratch/src" && "$scratch/venv/bin/pip" install -q --no-build-isolation --no-index . \
    >"$scratch/pip.log" 2>&1) || { tail -n 40 "$scratch/pip.log"; exit 1; }
site=$("$py" -c "import sysconfig; print(sysconfig.get_path('platlib'))")
cd "$scratch"
"$py" -c "
import mstar_c
assert mstar_c.__file__.startswith('$site'), mstar_c.__file__
assert mstar_c._mstar.__file__.endswith('_mstar.abi3.so')
print('pip install: import mstar_c from', mstar_c.__file__)"
"$scratch/venv/bin/pip" show mstar-c | grep -q "^Name: mstar-c"
"$py" "$scratch/src/python/examples/arena_workers.py" >"$scratch/example.log" 2>&1 ||
    { tail -n 20 "$scratch/example.log"; echo "pip install: arena_workers.py failed"; exit 1; }
"$scratch/venv/bin/pip" uninstall -q -y mstar-c
left=$(ls "$site" | grep -i "mstar" || true)
[ -z "$left" ] || { echo "pip install: left after uninstall: $left"; exit 1; }
if "$py" -c "import mstar_c" 2>/dev/null; then
    echo "pip install: mstar_c still imports after uninstall"
    exit 1
fi
echo "pip install: installed, imported, ran the example, uninstalled clean"
