/*
 * sanitized.h — whether this test program is built with a sanitizer that brings its own malloc
 * (ASan, TSan). There, freed memory waits in a quarantine and allocations are padded, so a test
 * of what glibc's allocator does (a block reused, a call failed by interposition) has nothing to
 * observe and skips.
 */
#ifndef MSTAR_TEST_SANITIZED_H
#define MSTAR_TEST_SANITIZED_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MSTAR_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MSTAR_TEST_SANITIZED 1
#endif
#endif

#endif
