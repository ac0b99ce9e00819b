/* Unit tests for core/crc32c.h: known values, both paths against a bitwise
 * reference, chaining, and first use from several threads at once (run
 * first, while the tables are still unset; scripts/tsan.sh runs it under
 * ThreadSanitizer, which reports any unsynchronised set-up). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

/* One bit at a time: slow, obviously right, no shared state. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    while (len-- > 0) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void fill(uint8_t *buf, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
}

#define COLD_THREADS 8
#define COLD_ROUNDS 200

struct cold_arg {
    pthread_barrier_t *start;
    unsigned index;
    unsigned mismatches;
};

static void *cold_worker(void *p)
{
    struct cold_arg *a = p;
    uint8_t buf[1031];
    fill(buf, sizeof(buf), a->index + 1);
    uint32_t want = crc_bitwise(0, buf, sizeof(buf));
    pthread_barrier_wait(a->start);
    for (int r = 0; r < COLD_ROUNDS; r++) {
        /* Alternate paths so the first call of each thread races both set-ups. */
        uint32_t got =
            (r + a->index) % 2 == 0 ? crc32c_sw(0, buf, sizeof(buf)) : crc32c(0, buf, sizeof(buf));
        if (got != want)
            a->mismatches++;
    }
    return NULL;
}

/* Must run before anything else in this process computes a CRC. */
static void test_cold_start_from_threads(void **state)
{
    (void)state;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, COLD_THREADS);
    pthread_t threads[COLD_THREADS];
    struct cold_arg args[COLD_THREADS];
    for (unsigned i = 0; i < COLD_THREADS; i++) {
        args[i] = (struct cold_arg){.start = &start, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, cold_worker, &args[i]), 0);
    }
    unsigned mismatches = 0;
    for (unsigned i = 0; i < COLD_THREADS; i++) {
        pthread_join(threads[i], NULL);
        mismatches += args[i].mismatches;
    }
    pthread_barrier_destroy(&start);
    assert_int_equal(mismatches, 0);
}

static void test_known_values(void **state)
{
    (void)state;
    /* RFC 3720 B.4 and the usual check value. */
    assert_int_equal(crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(crc32c_sw(0, "123456789", 9), 0xe3069283u);
    uint8_t zeros[32] = {0};
    assert_int_equal(crc32c(0, zeros, sizeof(zeros)), 0x8a9136aau);
    uint8_t ones[32];
    memset(ones, 0xff, sizeof(ones));
    assert_int_equal(crc32c_sw(0, ones, sizeof(ones)), 0x62a8ab43u);
    assert_int_equal(crc32c(0x12345678u, "", 0), 0x12345678u);
}

/* Every alignment and length around the 8-byte blocks, both paths, and a
 * chain split at every point equals the whole. */
static void test_paths_agree(void **state)
{
    (void)state;
    uint8_t buf[300];
    fill(buf, sizeof(buf), 7);
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len + off <= sizeof(buf); len += (len < 40 ? 1 : 13)) {
            uint32_t want = crc_bitwise(0, buf + off, len);
            assert_int_equal(crc32c(0, buf + off, len), want);
            assert_int_equal(crc32c_sw(0, buf + off, len), want);
        }
    }
    uint32_t whole = crc32c(0, buf, sizeof(buf));
    for (size_t cut = 0; cut <= sizeof(buf); cut += 7) {
        assert_int_equal(crc32c(crc32c(0, buf, cut), buf + cut, sizeof(buf) - cut), whole);
        assert_int_equal(crc32c_sw(crc32c_sw(0, buf, cut), buf + cut, sizeof(buf) - cut), whole);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_start_from_threads),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_paths_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
