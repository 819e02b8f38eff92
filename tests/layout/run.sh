#!/bin/sh
# The layering of src/ that docs/architecture.md promises: a folder includes the internal headers
# of the folders below it only. The device layer (backends, allocators) and the transport
# (src/tensors) know no graph code: a graph pool reaches the device through hooks it installs.
# The examples use the public headers only (<mstar/...>), as a program outside the repository
# would. Usage: run.sh SOURCE_DIR
set -u
src="$1/src"
fail=0

# allow DIR "FOLDERS": DIR's sources include internal headers of DIR and FOLDERS only.
allow() {
    for upper in core wire device mesh tensors resources graphs; do
        case " $1 $2 " in *" $upper "*) continue ;; esac
        hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$upper/" "$src/$1" \
            --include='*.c' --include='*.h' --include='*.cu' 2>/dev/null)
        if [ -n "$hits" ]; then
            echo "layering: src/$1 may include only $2 (not $upper/):"
            echo "$hits"
            fail=1
        fi
    done
}

allow core ""
allow wire "core"
allow device "core"
allow mesh "core wire"
allow tensors "core wire mesh device"
allow resources "core wire device"
allow graphs "core wire mesh device tensors resources"

hits=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$1"/examples/*.c 2>/dev/null)
if [ -n "$hits" ]; then
    echo "layering: examples include only <mstar/...> and system headers:"
    echo "$hits"
    fail=1
fi

[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
