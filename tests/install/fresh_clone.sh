#!/bin/sh
# The README's install on a fresh clone (CI: .ci/run): clone the committed tree of the repository
# this script lives in, then `make install` it into a scratch prefix twice: as configured (the
# Python package when python3-dev is there) and with -DMSTAR_PYTHON=OFF. Each install must
# succeed on its own build folder, install libmstar and the command, and, when the package was
# built, `import mstar_c` must load the installed package (not the build tree's) against the
# installed libmstar. Usage: fresh_clone.sh [scratch-dir]; the scratch dir goes at the end.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
scratch=${1:-$(mktemp -d)}
trap 'rm -rf "$scratch"' EXIT
git clone -q "$src" "$scratch/clone"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
launcher=""
command -v ccache >/dev/null 2>&1 && launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache"

for python in AUTO OFF; do
    prefix="$scratch/prefix-$python"
    make -C "$scratch/clone" install BUILD="$scratch/build-$python" PREFIX="$prefix" \
        JOBS="${JOBS:-2}" \
        CMAKE_FLAGS="-DMSTAR_PYTHON=$python -DMSTAR_BUILD_TESTS=OFF -DMSTAR_CUDA=OFF $launcher" \
        >"$scratch/install-$python.log" 2>&1 ||
        { tail -n 30 "$scratch/install-$python.log"; echo "fresh clone: make install ($python) failed"; exit 1; }
    [ -x "$prefix/bin/mstar" ] || { echo "fresh clone: $prefix/bin/mstar missing"; exit 1; }
    pkg=$(find "$prefix" -type d -name mstar_c)
    if [ "$python" = OFF ]; then
        [ -z "$pkg" ] || { echo "fresh clone: -DMSTAR_PYTHON=OFF installed $pkg"; exit 1; }
        continue
    fi
    if ! grep -q "^MSTAR_PYTHON_INSTALL_DIR" "${scratch}/build-${python}/CMakeCache.txt"; then
        echo "fresh clone: no Python 3.11+ with headers here; the package was not built"
        continue
    fi
    [ -n "$pkg" ] || { echo "fresh clone: the Python package was not installed"; exit 1; }
    (cd "$scratch" && PYTHONPATH="$(dirname "$pkg")" "$py" -c "
import mstar_c, sys
assert mstar_c.__file__.startswith('$prefix'), mstar_c.__file__
assert mstar_c._mstar.__file__.startswith('$prefix'), mstar_c._mstar.__file__
mstar_c.version()
print('fresh clone: import mstar_c from', mstar_c.__file__)")
done
echo "fresh clone: make install ran with and without the Python package"
