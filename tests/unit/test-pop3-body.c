/* Unit tests for protocols/pop3/pop3-body.h (RETR/TOP wire form) and
 * protocols/pop3/pop3-uidl.h (unique-id formats). Every message is written
 * in one call and in pieces of 1, 2, 3 and 7 bytes: the output must be the
 * same. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "protocols/pop3/pop3-body.h"
#include "protocols/pop3/pop3-uidl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *write_all(const char *msg, size_t len, bool top, uint64_t lines, size_t step,
                       size_t *out_len)
{
    struct pop3_body_writer w;
    pop3_body_init(&w, msg, len, top, lines);
    struct buf out = {0};
    size_t calls = 0;
    while (true) {
        size_t before = out.len;
        bool done = pop3_body_write(&w, &out, step);
        assert_true(out.len > before || done);
        /* A piece overshoots its size by at most a stuffed dot, a CRLF and
         * the terminator. */
        assert_true(out.len - before <= step + 6);
        if (done)
            break;
        assert_true(++calls < 10 * len + 100);
    }
    size_t again = out.len;
    assert_true(pop3_body_write(&w, &out, step));
    assert_int_equal(out.len, again);
    *out_len = out.len;
    if (out.data == NULL)
        buf_append_str(&out, "");
    return buf_steal(&out);
}

static void check_n(const char *msg, size_t len, bool top, uint64_t lines, const char *expect,
                    size_t expect_len)
{
    static const size_t steps[] = {1000000, 1, 2, 3, 7};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        size_t got_len = 0;
        char *got = write_all(msg, len, top, lines, steps[i], &got_len);
        if (got_len != expect_len || memcmp(got, expect, expect_len) != 0)
            fprintf(stderr, "step %zu: got [%.*s] expected [%.*s]\n", steps[i], (int)got_len, got,
                    (int)expect_len, expect);
        assert_int_equal(got_len, expect_len);
        assert_memory_equal(got, expect, expect_len);
        free(got);
    }
}

static void check(const char *msg, bool top, uint64_t lines, const char *expect)
{
    check_n(msg, strlen(msg), top, lines, expect, strlen(expect));
}

static void test_retr(void **state)
{
    (void)state;
    check("", false, 0, ".\r\n");
    check("a\r\nb\r\n", false, 0, "a\r\nb\r\n.\r\n");
    check("a\nb\n", false, 0, "a\r\nb\r\n.\r\n");
    check("a\r\nb\nc", false, 0, "a\r\nb\r\nc\r\n.\r\n");
    check("no newline", false, 0, "no newline\r\n.\r\n");
    check("bare\rcr\r\n\rx\n", false, 0, "bare\rcr\r\n\rx\r\n.\r\n");
    check("\n\n", false, 0, "\r\n\r\n.\r\n");
    check("\r\n", false, 0, "\r\n.\r\n");
    check("\r", false, 0, "\r\r\n.\r\n");
    check_n("a\0b\n", 4, false, 0, "a\0b\r\n.\r\n", 8);
}

static void test_dot_stuffing(void **state)
{
    (void)state;
    check(".", false, 0, "..\r\n.\r\n");
    check(".\r\n", false, 0, "..\r\n.\r\n");
    check("..\n", false, 0, "...\r\n.\r\n");
    check("a\r\n.b\r\n x.\r\n.\n", false, 0, "a\r\n..b\r\n x.\r\n..\r\n.\r\n");
    check("a\r.b\r\n", false, 0, "a\r.b\r\n.\r\n"); /* a bare CR does not start a line */
}

static void test_top(void **state)
{
    (void)state;
    const char *msg = "H: 1\r\nH: 2\r\n\r\nb1\r\nb2\r\nb3\r\n";
    check(msg, true, 0, "H: 1\r\nH: 2\r\n\r\n.\r\n");
    check(msg, true, 1, "H: 1\r\nH: 2\r\n\r\nb1\r\n.\r\n");
    check(msg, true, 3, "H: 1\r\nH: 2\r\n\r\nb1\r\nb2\r\nb3\r\n.\r\n");
    check(msg, true, UINT64_MAX, "H: 1\r\nH: 2\r\n\r\nb1\r\nb2\r\nb3\r\n.\r\n");
    check("H: 1\nH: 2\n\n.b1\nb2", true, 1, "H: 1\r\nH: 2\r\n\r\n..b1\r\n.\r\n");
    check("H: 1\nH: 2\n\nb1\nb2", true, 5, "H: 1\r\nH: 2\r\n\r\nb1\r\nb2\r\n.\r\n");
    check("H: only\r\nX: y", true, 2, "H: only\r\nX: y\r\n.\r\n");
    check("\r\nbody\r\n", true, 0, "\r\n.\r\n");
    check("\nbody\n", true, 1, "\r\nbody\r\n.\r\n");
    check("H: 1\r\n\r\n\r\n\r\nx\r\n", true, 2, "H: 1\r\n\r\n\r\n\r\n.\r\n");
    check("H: 1\r\n \r\nstill header\r\n\r\nb\r\n", true, 0,
          "H: 1\r\n \r\nstill header\r\n\r\n.\r\n");
    check("", true, 3, ".\r\n");
}

static void test_size(void **state)
{
    (void)state;
    assert_int_equal(pop3_body_size("", 0), 0);
    assert_int_equal(pop3_body_size("a\r\nb\r\n", 6), 6);
    assert_int_equal(pop3_body_size("a\nb\n", 4), 6);
    assert_int_equal(pop3_body_size("\n\r\n\n", 4), 6);
    assert_int_equal(pop3_body_size("x", 1), 1);
}

static void uidl(const char *format, uint32_t uid, uint32_t uidv, const char *expect)
{
    struct petrel_error err;
    assert_true(pop3_uidl_format_check(format, &err));
    struct buf out = {0};
    pop3_uidl_format(format, uid, uidv, &out);
    assert_string_equal(out.data, expect);
    buf_free(&out);
}

static void uidl_bad(const char *format, const char *message)
{
    struct petrel_error err;
    assert_false(pop3_uidl_format_check(format, &err));
    if (strstr(err.message, message) == NULL)
        fprintf(stderr, "format %s: %s\n", format, err.message);
    assert_non_null(strstr(err.message, message));
}

static void test_uidl_formats(void **state)
{
    (void)state;
    /* Dovecot 2.3 prints %X in lower case (its var_expand's "%llx"). */
    uidl(POP3_UIDL_DEFAULT_FORMAT, 42, 1600000000, "0000002a5f5e1000");
    uidl("%08Xu%08Xv", UINT32_MAX, UINT32_MAX, "ffffffffffffffff");
    uidl("%u", 7, 9, "7");
    uidl("%u.%v", 7, 9, "7.9");
    uidl("%Xu-%Xv", 255, 16, "ff-10");
    uidl("%xu-%xv", 255, 16, "ff-10");
    /* Modifiers apply in the order written. */
    uidl("%XUu-%UXv", 255, 16, "FF-10");
    uidl("%08XUu%08XUv", 42, 1600000000, "0000002A5F5E1000");
    uidl("%LXu%Lv", 171, 3, "ab3");
    uidl("%5u", 42, 0, "00042");
    uidl("%%%u%%", 1, 0, "%1%");
    uidl("UID%020u", 1, 0, "UID00000000000000000001");
    uidl_bad("", "needs %u");
    uidl_bad("%v", "needs %u");
    uidl_bad("%", "unknown variable");
    uidl_bad("%x", "unknown variable");
    uidl_bad("%XXXXXXXXXu", "too many modifiers");
    uidl_bad("%Qu", "unknown variable");
    uidl_bad("%08Xz", "unknown variable");
    uidl_bad("%021u", "unknown variable");
    uidl_bad("a b%u", "printable");
    uidl_bad("\x80%u", "printable");
    uidl_bad("%20u%20u%20u%20u", "RFC 1939 allows 70");
    uidl("%20u%20u%20u%10v", 1, 2,
         "0000000000000000000100000000000000000001000000000000000000010000000002");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retr),         cmocka_unit_test(test_dot_stuffing),
        cmocka_unit_test(test_top),          cmocka_unit_test(test_size),
        cmocka_unit_test(test_uidl_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
