/*
 * test_cuda_ipc.c — the host-side logic of the CUDA IPC route, without a GPU: the device layer's
 * export and open (the host backend's in-process stand-in).
 */
#include "mstar_test.h"

#include "device/backend.h"

#include <string.h>

/* ---- the device layer's export and open (host stand-in) ---------------------------------- */

static void test_export_open(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CPU, 0 }, &b));
    void *p, *q;
    assert_mstar_ok(mstar_caching_alloc(b, 1000, &p));
    assert_mstar_ok(mstar_caching_alloc(b, 3000, &q));
    mstar__ipc_segment s1, s2;
    assert_mstar_ok(mstar__ipc_export(b, p, 1000, &s1));
    assert_mstar_ok(mstar__ipc_export(b, (char *)q + 8, 100, &s2));
    /* Both blocks share one 2 MiB segment: one handle. */
    assert_int_equal(s1.size, MSTAR__SEGMENT_ROUND);
    assert_ptr_equal(s1.base, s2.base);
    assert_memory_equal(s1.handle, s2.handle, MSTAR__IPC_HANDLE_BYTES);
    void *base;
    uint64_t size;
    assert_mstar_ok(mstar__ipc_open(b, s1.handle, &base, &size));
    assert_ptr_equal(base, s1.base);
    assert_int_equal(size, s1.size);
    mstar__ipc_close(b, base);
    /* A forged handle names nothing. */
    uint8_t forged[MSTAR__IPC_HANDLE_BYTES];
    memcpy(forged, s1.handle, sizeof(forged));
    forged[30] ^= 0x5a;
    assert_mstar_status(mstar__ipc_open(b, forged, &base, &size), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "no live exported segment"));
    /* Memory outside the backend's allocations, or a range past a segment's end, exports not. */
    char local[64];
    assert_mstar_status(mstar__ipc_export(b, local, sizeof(local), &s2), MSTAR_ENOENT);
    assert_mstar_status(mstar__ipc_export(b, p, MSTAR__SEGMENT_ROUND + 1, &s2), MSTAR_ENOENT);
    assert_mstar_ok(mstar_caching_free(b, p));
    assert_mstar_ok(mstar_caching_free(b, q));
    /* Once its backend is gone the handle opens nothing. */
    mstar_backend_destroy(b);
    assert_mstar_ok(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CPU, 0 }, &b));
    assert_mstar_status(mstar__ipc_open(b, s1.handle, &base, &size), MSTAR_ENOENT);
    /* Events: the stand-in's handle opens a complete event; another handle is refused. */
    mstar_event *e, *o;
    uint8_t h[MSTAR__IPC_HANDLE_BYTES];
    assert_mstar_ok(mstar__ipc_event_create(b, &e, h));
    assert_mstar_ok(mstar__ipc_event_open(b, h, &o));
    assert_mstar_ok(mstar_event_query(o));
    mstar_event_destroy(o);
    assert_mstar_status(mstar__ipc_event_open(b, forged, &o), MSTAR_ENOENT);
    mstar_event_destroy(e);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
