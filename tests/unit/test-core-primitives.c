/* Unit tests for the core primitives: the clock helper (core/clock.h), the
 * slice type with its number and hex parsers (core/slice.h) and the timed
 * file lock (core/file-lock.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/file-lock.h"
#include "core/slice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------- clock ---------- */

static void test_clock(void **state)
{
    (void)state;
    int64_t a = clock_mono_ms();
    struct timespec start = clock_mono_now();
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    int64_t b = clock_mono_ms();
    assert_true(b - a >= 20);
    assert_true(clock_ms_since(&start) >= 20);
    assert_true(clock_seconds_since(&start) >= 0.02);
    assert_true(clock_mono_us() / 1000 >= b);
    /* the real clock is the epoch clock: after 2020, and the units agree */
    assert_true(clock_real_sec() > 1577836800);
    int64_t ms = clock_real_ms();
    assert_true(ms / 1000 - clock_real_sec() <= 1);
    assert_true(clock_real_us() / 1000 >= ms);

    struct timeval tv = clock_ms_to_timeval(2345);
    assert_int_equal(tv.tv_sec, 2);
    assert_int_equal(tv.tv_usec, 345000);
    tv = clock_ms_to_timeval(-5);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 0);
    tv = clock_ms_to_timeval(INT64_MAX / 1000);
    assert_true(tv.tv_sec > 0);
}

/* ---------- slices and numbers ---------- */

static struct slice sl(const char *s)
{
    return slice_of(s);
}

static void test_slice_compare(void **state)
{
    (void)state;
    struct slice s = {.ptr = "Content-Length: 5", .len = 14};
    assert_true(slice_eq(s, "Content-Length"));
    assert_false(slice_eq(s, "content-length"));
    assert_true(slice_eq_ci(s, "content-LENGTH"));
    assert_false(slice_eq(s, "Content-Lengt"));
    assert_false(slice_eq(s, "Content-Length:"));
    assert_true(slice_eq((struct slice){.ptr = NULL, .len = 0}, ""));
}

static void test_parse_u64(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_true(slice_parse_u64(sl("0"), 10, &v));
    assert_int_equal(v, 0);
    assert_true(str_parse_u64("0065535", 65535, &v));
    assert_int_equal(v, 65535);
    assert_false(str_parse_u64("65536", 65535, &v));
    /* a bound under 9: a single digit above it is refused too */
    assert_false(str_parse_u64("7", 5, &v));
    assert_false(str_parse_u64("1", 0, &v));
    assert_true(str_parse_u64("5", 5, &v));
    assert_int_equal(v, 5);
    assert_false(slice_parse_hex_u64(sl("c"), 9, &v));
    assert_true(str_parse_u64("18446744073709551615", UINT64_MAX, &v));
    assert_true(v == UINT64_MAX);
    assert_false(str_parse_u64("18446744073709551616", UINT64_MAX, &v));
    assert_false(str_parse_u64("99999999999999999999999", UINT64_MAX, &v));
    /* what strtoul would accept and a wire format must not */
    const char *bad[] = {"", " 1", "1 ", "+1", "-1", "0x10", "1e3", "1.0", "１"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(str_parse_u64(bad[i], UINT64_MAX, &v));
    /* a slice stops where it says, not at a NUL */
    struct slice part = {.ptr = "1234xyz", .len = 4};
    assert_true(slice_parse_u64(part, UINT64_MAX, &v));
    assert_int_equal(v, 1234);
    struct slice with_nul = {.ptr = "12\0"
                                    "3",
                             .len = 4};
    assert_false(slice_parse_u64(with_nul, UINT64_MAX, &v));
    assert_int_equal(v, 1234); /* untouched on failure */
}

static void test_parse_i64(void **state)
{
    (void)state;
    int64_t v = 0;
    assert_true(str_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v));
    assert_true(v == INT64_MIN);
    assert_true(str_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v));
    assert_true(v == INT64_MAX);
    assert_false(str_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v));
    assert_false(str_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v));
    assert_true(str_parse_i64("+42", INT64_MIN, INT64_MAX, &v));
    assert_int_equal(v, 42);
    assert_true(str_parse_i64("-0", 0, 10, &v));
    assert_int_equal(v, 0);
    assert_false(str_parse_i64("-1", 0, 10, &v));
    assert_false(str_parse_i64("11", 0, 10, &v));
    assert_false(str_parse_i64("5", 6, 10, &v));
    assert_false(str_parse_i64("-", INT64_MIN, INT64_MAX, &v));
    assert_false(str_parse_i64("--1", INT64_MIN, INT64_MAX, &v));
    assert_false(str_parse_i64(" 1", INT64_MIN, INT64_MAX, &v));
}

static void test_parse_hex(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_true(slice_parse_hex_u64(sl("fF09"), UINT64_MAX, &v));
    assert_int_equal(v, 0xff09);
    assert_true(slice_parse_hex_u64(sl("ffffffffffffffff"), UINT64_MAX, &v));
    assert_true(v == UINT64_MAX);
    assert_false(slice_parse_hex_u64(sl("10000000000000000"), UINT64_MAX, &v));
    assert_false(slice_parse_hex_u64(sl("1000"), 0xfff, &v));
    assert_false(slice_parse_hex_u64(sl("0x1"), UINT64_MAX, &v));
    assert_false(slice_parse_hex_u64(sl("g"), UINT64_MAX, &v));
    assert_false(slice_parse_hex_u64(sl(""), UINT64_MAX, &v));
    assert_int_equal(hex_digit_value('a'), 10);
    assert_int_equal(hex_digit_value('F'), 15);
    assert_int_equal(hex_digit_value('9'), 9);
    assert_int_equal(hex_digit_value('g'), -1);
    assert_int_equal(hex_digit_value('\0'), -1);
}

/* ---------- file locks ---------- */

static void test_file_lock(void **state)
{
    (void)state;
    char path[] = "/tmp/petrel-test-lock.XXXXXX";
    int fd1 = mkstemp(path);
    assert_true(fd1 >= 0);
    /* flock belongs to the open file description: a second open() is a
     * second holder, as another process would be */
    int fd2 = open(path, O_RDWR);
    assert_true(fd2 >= 0);

    assert_int_equal(file_lock_take(fd1, true, 0, NULL), FILE_LOCK_TAKEN);
    int64_t waited = -1;
    assert_int_equal(file_lock_take(fd2, true, 0, &waited), FILE_LOCK_TIMEOUT);
    assert_true(waited >= 0 && waited < 50);
    /* the deadline holds: about 150 ms, not for ever, not at once */
    assert_int_equal(file_lock_take(fd2, false, 150, &waited), FILE_LOCK_TIMEOUT);
    assert_true(waited >= 150 && waited < 1000);

    file_lock_release(fd1);
    assert_int_equal(file_lock_take(fd2, false, 0, NULL), FILE_LOCK_TAKEN);
    assert_int_equal(file_lock_take(fd1, false, 0, NULL), FILE_LOCK_TAKEN); /* shared + shared */
    assert_int_equal(file_lock_take(fd1, true, 50, NULL), FILE_LOCK_TIMEOUT);
    file_lock_release(fd2);
    assert_int_equal(file_lock_take(fd1, true, 0, NULL), FILE_LOCK_TAKEN); /* upgrade */

    /* a holder that lets go while we wait: taken before the deadline */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
        file_lock_release(fd1);
        _exit(0);
    }
    close(fd1); /* the child's copy of the description still holds it */
    assert_int_equal(file_lock_take(fd2, true, 5000, &waited), FILE_LOCK_TAKEN);
    assert_true(waited >= 50 && waited < 5000);

    assert_int_equal(file_lock_take(-1, true, 100, NULL), FILE_LOCK_ERROR);
    assert_int_equal(errno, EBADF);
    close(fd2);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock),     cmocka_unit_test(test_slice_compare),
        cmocka_unit_test(test_parse_u64), cmocka_unit_test(test_parse_i64),
        cmocka_unit_test(test_parse_hex), cmocka_unit_test(test_file_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
