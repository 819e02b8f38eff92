#!/bin/sh
# The install test: install the build into a scratch prefix, check that libmstar.so exports
# exactly the functions the installed headers declare, then compile and run a program against it
# the way a user would — through pkg-config, against the shared library and the static one.
set -eu
build="$1"
src="$2"
prefix="$build/install-test"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib* | head -n 1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists mstar || { echo "install test: mstar.pc not found under $libdir/pkgconfig"; exit 1; }
for f in "$prefix/include/mstar/mstar.h" "$libdir/cmake/mstar/mstarConfig.cmake"; do
    [ -f "$f" ] || { echo "install test: $f missing"; exit 1; }
done
ls "$libdir"/libmstar.so.0 >/dev/null
"$(dirname "$0")/check_exports.sh" "$prefix/include" "$libdir/libmstar.so.0" "$prefix"
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/consumer" "$src" $(pkg-config --cflags --libs mstar)
LD_LIBRARY_PATH="$libdir" "$prefix/consumer"
cc -std=c11 -o "$prefix/consumer_static" "$src" $(pkg-config --cflags mstar) \
    "$libdir/libmstar.a" $(pkg-config --libs --static mstar | sed 's/-lmstar//')
"$prefix/consumer_static"
echo "install test: shared and static consumers ran"
