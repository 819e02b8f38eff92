/*
 * fuzz_ucx_key.c — what a UCX consumer parses from another process's descriptor: the remote-key
 * envelope (ucx_rkey.c) and the session id (ucx_config.c). The first byte picks which; the rest
 * is the input. Neither may crash, read out of bounds or accept a key whose UCX part would make
 * ucp_ep_rkey_unpack walk past the bytes given.
 */
#include "tensors/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        char *s = malloc(n + 1);
        if (s == NULL)
            return 0;
        memcpy(s, in, n);
        s[n] = '\0';
        struct sockaddr_storage sa;
        socklen_t len;
        if (mstar__ucx_session_parse(s, "fuzz", &sa, &len) == MSTAR_OK && sa.ss_family != AF_INET &&
            sa.ss_family != AF_INET6)
            abort();
        free(s);
        return 0;
    }
    if (n > MSTAR_REMOTE_KEY_MAX + 16)
        return 0;
    uint8_t *key = malloc(n > 0 ? n : 1); /* exactly n bytes, so ASan sees any over-read */
    if (key == NULL)
        return 0;
    memcpy(key, in, n);
    mstar__ucx_key_view v;
    if (mstar__ucx_key_parse(key, (uint32_t)n, "fuzz", &v) == MSTAR_OK) {
        if (v.region_id == 0 || v.ucx_rkey + v.ucx_rkey_len != key + n)
            abort();
        uint8_t out[MSTAR_REMOTE_KEY_MAX];
        uint32_t out_len;
        if (mstar__ucx_key_pack(&v, out, sizeof(out), &out_len) != MSTAR_OK || out_len != n ||
            memcmp(out, key, n) != 0)
            abort(); /* what parses packs back to the same bytes */
    }
    free(key);
    return 0;
}
