#!/bin/sh
# The layering the folders promise (docs/architecture.md): a lower layer includes nothing of a
# higher one. src/device (backends, allocators) and src/tensors (transport) know no graph code:
# the graph pool reaches the device through hooks it installs. The examples use the public
# headers only (<mstar/...>), as a program outside the repository would. Usage: run.sh SOURCE_DIR
set -u
src="$1/src"
fail=0

# forbid DIR PATTERN WHY: no #include "PATTERN..." in any C source under DIR.
forbid() {
    hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$2" "$src/$1" \
        --include='*.c' --include='*.h' --include='*.cu' 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "layering: src/$1 must not include $2 headers ($3):"
        echo "$hits"
        fail=1
    fi
}

for lower in core wire device; do
    forbid "$lower" 'graphs/' 'the device layer sits below graphs'
    forbid "$lower" 'tensors/' 'the transport sits above it'
done
forbid tensors 'graphs/' 'the transport needs devices, not graphs'
forbid core 'device/' 'core sits below every layer'

hits=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$1"/examples/*.c 2>/dev/null)
if [ -n "$hits" ]; then
    echo "layering: examples include only <mstar/...> and system headers:"
    echo "$hits"
    fail=1
fi

[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
