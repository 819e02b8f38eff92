#!/bin/sh
# Installs the Debian packages mstar-c builds, tests and runs with — only the missing ones, so a
# second run on a set-up machine installs nothing and takes a moment.
set -eu
packages="cmake make gcc pkg-config libzmq3-dev libmsgpuck-dev libucx-dev libcmocka-dev \
libyaml-dev clang clang-format libclang-rt-14-dev iproute2 procps \
python3-dev python3-pytest python3-numpy python3-torch libdlpack-dev \
python3-pip python3-venv python3-setuptools python3-wheel python3-build git"
missing=""
for p in $packages; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
echo "mstar: installing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "mstar: need root (or sudo) to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
