/* Unit tests for core/buf.h: growth, termination and number formatting. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"

#include <stdio.h>
#include <string.h>

/* buf_append_uint against printf for edges and a spread of values. */
static void test_append_uint_matches_printf(void **state)
{
    (void)state;
    const unsigned long long values[] = {
        0, 1, 9, 10, 99, 100, 4294967295ull, 4294967296ull, 18446744073709551615ull};
    struct buf b = {0};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char want[32];
        snprintf(want, sizeof(want), "%llu", values[i]);
        buf_reset(&b);
        buf_append_uint(&b, values[i]);
        assert_string_equal(b.data, want);
        assert_int_equal(b.len, strlen(want));
        char digits[UINT_DIGITS_MAX];
        size_t n = uint_to_digits(digits, values[i]);
        assert_int_equal(n, strlen(want));
        assert_memory_equal(digits, want, n);
    }
    unsigned long long v = 7;
    for (int i = 0; i < 60; i++, v = v * 3 + 1) {
        char want[32];
        snprintf(want, sizeof(want), "%llu", v);
        buf_reset(&b);
        buf_append_uint(&b, v);
        assert_string_equal(b.data, want);
    }
    buf_free(&b);
}

/* Appends go after what is there, and the buffer stays NUL-terminated. */
static void test_append_uint_after_text(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_append_str(&b, "* ");
    buf_append_uint(&b, 42);
    buf_append_str(&b, " FETCH (UID ");
    buf_append_uint(&b, 4000000000u);
    buf_append_char(&b, ')');
    assert_string_equal(buf_cstr(&b), "* 42 FETCH (UID 4000000000)");
    buf_free(&b);
}

/* An insert moves what follows and keeps the terminator, at every position. */
static void test_insert(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_insert(&b, 0, "abc", 3);
    assert_string_equal(buf_cstr(&b), "abc");
    buf_insert(&b, 3, "def", 3);
    assert_string_equal(buf_cstr(&b), "abcdef");
    buf_insert(&b, 0, "<", 1);
    buf_insert(&b, 4, " {3}", 4);
    assert_string_equal(buf_cstr(&b), "<abc {3}def");
    buf_insert(&b, 2, "", 0);
    assert_int_equal(b.len, 11);
    /* Growth while inserting keeps the moved tail intact. */
    for (int i = 0; i < 200; i++)
        buf_insert(&b, 1, "0123456789", 10);
    assert_int_equal(b.len, 2011);
    assert_memory_equal(b.data, "<0123456789", 11);
    assert_string_equal(b.data + 2001, "abc {3}def");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_uint_matches_printf),
        cmocka_unit_test(test_append_uint_after_text),
        cmocka_unit_test(test_insert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
