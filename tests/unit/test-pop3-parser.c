/* Unit tests for protocols/pop3/pop3-parser.h: every input is fed in one
 * piece, byte by byte and in chunks of 3 (each chunk in its own exact-size
 * allocation), and all three must give the same transcript of events:
 *   "C(NAME|arg|arg|rest=...)"  a command
 *   "L(...)"                    a raw line (after expect_line)
 *   "E(code,message)"           a non-fatal error
 *   "F(code,message)"           a fatal error (nothing more is parsed)
 *   "..."                       input ended inside a line
 * A line in the input that starts with "\x01" asks for expect_line before
 * it is fed (the marker itself is not fed). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "protocols/pop3/pop3-parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void describe_bytes(struct buf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            buf_printf(b, "\\x%02x", c);
        else
            buf_append_char(b, (char)c);
    }
}

static void describe(struct pop3_parser *p, enum pop3_parse_result r, struct buf *t)
{
    if (r == POP3_PARSE_COMMAND) {
        const struct pop3_command *c = pop3_parser_command(p);
        assert_non_null(c);
        buf_printf(t, "C(%s", c->name);
        for (size_t i = 0; i < c->arg_count; i++) {
            buf_append_char(t, '|');
            describe_bytes(t, c->args[i], strlen(c->args[i]));
        }
        buf_append_str(t, "|rest=");
        assert_int_equal(strlen(c->rest), c->rest_len);
        describe_bytes(t, c->rest, c->rest_len);
        buf_append_str(t, ")");
    } else if (r == POP3_PARSE_LINE) {
        size_t len = 0;
        const char *line = pop3_parser_line(p, &len);
        assert_non_null(line);
        buf_append_str(t, "L(");
        describe_bytes(t, line, len);
        buf_append_str(t, ")");
    } else if (r == POP3_PARSE_ERROR) {
        const struct pop3_parse_error *e = pop3_parser_error(p);
        assert_non_null(e);
        buf_printf(t, "%c(%d,%s)", e->fatal ? 'F' : 'E', (int)e->code, e->message);
    }
}

/* Feeds `in` in pieces of `step` bytes (0: all at once); returns the
 * transcript (caller frees). */
static char *run(const char *in, size_t len, size_t step, const struct pop3_parser_limits *lim)
{
    struct pop3_parser *p = pop3_parser_new(lim);
    struct buf t = {0};
    size_t pos = 0;
    bool at_line_start = true;
    bool fatal = false;
    while (pos < len && !fatal) {
        if (at_line_start && in[pos] == '\x01') {
            pop3_parser_expect_line(p);
            pos++;
            continue;
        }
        size_t piece = step == 0 ? len - pos : step;
        if (piece > len - pos)
            piece = len - pos;
        /* Never feed the marker of the next line along with this one. */
        const char *nl = memchr(in + pos, '\n', piece);
        if (nl != NULL)
            piece = (size_t)(nl - (in + pos)) + 1;
        char *copy = malloc(piece);
        memcpy(copy, in + pos, piece);
        size_t off = 0;
        while (off < piece) {
            size_t used = 0;
            enum pop3_parse_result r = pop3_parser_feed(p, copy + off, piece - off, &used);
            assert_true(used <= piece - off);
            off += used;
            if (r == POP3_PARSE_NEED_MORE) {
                assert_int_equal(off, piece);
                break;
            }
            describe(p, r, &t);
            if (r == POP3_PARSE_ERROR && pop3_parser_error(p)->fatal) {
                size_t again = 99;
                assert_int_equal(pop3_parser_feed(p, "NOOP\r\n", 6, &again), POP3_PARSE_ERROR);
                assert_int_equal(again, 0);
                fatal = true;
                break;
            }
        }
        free(copy);
        pos += piece;
        at_line_start = in[pos - 1] == '\n';
    }
    if (!fatal && pop3_parser_in_line(p))
        buf_append_str(&t, "...");
    pop3_parser_free(p);
    if (t.data == NULL)
        buf_append_str(&t, "");
    return buf_steal(&t);
}

static void check_lim(const char *in, size_t len, const char *expect,
                      const struct pop3_parser_limits *lim)
{
    char *whole = run(in, len, 0, lim);
    char *bytes = run(in, len, 1, lim);
    char *threes = run(in, len, 3, lim);
    if (strcmp(whole, expect) != 0)
        fprintf(stderr, "input %s\n got    %s\n expect %s\n", in, whole, expect);
    assert_string_equal(whole, expect);
    assert_string_equal(bytes, expect);
    assert_string_equal(threes, expect);
    free(whole);
    free(bytes);
    free(threes);
}

static void check(const char *in, const char *expect)
{
    check_lim(in, strlen(in), expect, NULL);
}

static void test_commands(void **state)
{
    (void)state;
    check("USER alice\r\n", "C(USER|alice|rest=alice)");
    check("user alice\n", "C(USER|alice|rest=alice)");
    check("Stat\r\nLIST 1\r\n", "C(STAT|rest=)C(LIST|1|rest=1)");
    check("TOP 1 10\r\n", "C(TOP|1|10|rest=1 10)");
    check("PASS  two  spaces \r\n", "C(PASS|two|spaces|rest= two  spaces )");
    check("PASS\r\n", "C(PASS|rest=)");
    check("PASS \r\n", "C(PASS|rest=)");
    check("PASS p\tw\r\n", "C(PASS|p\\x09w|rest=p\\x09w)");
    check("PASS gr\xc3\xbc\xc3\x9f\r\n",
          "C(PASS|gr\\xc3\\xbc\\xc3\\x9f|rest=gr\\xc3\\xbc\\xc3\\x9f)");
    check("AUTH PLAIN AGFsaWNlAHdvbmRlcmxhbmQ=\r\n",
          "C(AUTH|PLAIN|AGFsaWNlAHdvbmRlcmxhbmQ=|rest=PLAIN AGFsaWNlAHdvbmRlcmxhbmQ=)");
    check("NOOP", "...");
    check("NOOP\r", "...");
    check("", "");
}

static void test_errors(void **state)
{
    (void)state;
    check("\r\n", "E(0,Empty command.)");
    check("   \r\nNOOP\r\n", "E(0,Empty command.)C(NOOP|rest=)");
    check(" NOOP\r\n", "E(1,Unknown command.)");
    check("ABCDEFGHIJKLMNOP\r\n", "E(1,Unknown command.)");
    check("ABCDEFGHIJKLMNO\r\n", "C(ABCDEFGHIJKLMNO|rest=)");
    check("\xff\r\n", "E(1,Unknown command.)");
    check("NO\rOP\r\nNOOP\r\n", "E(1,Invalid character in command.)C(NOOP|rest=)");
    check("PASS a\x7f\r\n", "E(1,Invalid character in command.)");
    check("PASS a\x01b\r\n", "E(1,Invalid character in command.)");
    check_lim("US\0ER\r\nNOOP\r\n", 13, "E(1,Invalid character in command.)C(NOOP|rest=)", NULL);
    check("TOP 1 2 3 4 5\r\nNOOP\r\n", "E(2,Too many arguments.)C(NOOP|rest=)");
    check("TOP 1 2 3 4\r\n", "C(TOP|1|2|3|4|rest=1 2 3 4)");
}

static void test_line_limit(void **state)
{
    (void)state;
    struct pop3_parser_limits lim = {.max_line = 8, .max_args = 4};
    check_lim("USER abc\r\nNOOP\r\n", 16, "C(USER|abc|rest=abc)C(NOOP|rest=)", &lim);
    check_lim("USER abc\nNOOP\n", 14, "C(USER|abc|rest=abc)C(NOOP|rest=)", &lim);
    check_lim("USER abcd\r\nNOOP\r\n", 17, "F(3,Line too long.)", &lim);
    check_lim("USER abcd", 9, "F(3,Line too long.)", &lim);
    check_lim("USER abc\r", 9, "...", &lim);
    check_lim("USER abc\rx", 10, "F(3,Line too long.)", &lim);
    check_lim("NOOP\r\nUSER abcdefghij\r\n", 23, "C(NOOP|rest=)F(3,Line too long.)", &lim);
    lim.max_args = 1;
    check_lim("TOP 1 2\r\n", 9, "E(2,Too many arguments.)", &lim);
}

static void test_expect_line(void **state)
{
    (void)state;
    check("AUTH PLAIN\r\n\x01"
          "AGFsaWNlAHdvbmRlcmxhbmQ=\r\nNOOP\r\n",
          "C(AUTH|PLAIN|rest=PLAIN)L(AGFsaWNlAHdvbmRlcmxhbmQ=)C(NOOP|rest=)");
    check("\x01\r\n", "L()");
    check("\x01*\r\n", "L(*)");
    check("\x01  spaces and \xff\r\n", "L(  spaces and \\xff)");
    struct pop3_parser_limits lim = {.max_line = 4, .max_args = 4};
    check_lim("\x01"
              "abcde\r\n",
              8, "F(3,Line too long.)", &lim);
}

static void test_reset_after_fatal(void **state)
{
    (void)state;
    struct pop3_parser_limits lim = {.max_line = 4, .max_args = 4};
    struct pop3_parser *p = pop3_parser_new(&lim);
    size_t used = 0;
    assert_int_equal(pop3_parser_feed(p, "TOOLONG", 7, &used), POP3_PARSE_ERROR);
    assert_true(pop3_parser_error(p)->fatal);
    assert_null(pop3_parser_command(p));
    pop3_parser_reset(p);
    assert_int_equal(pop3_parser_feed(p, "NOOP\r\n", 6, &used), POP3_PARSE_COMMAND);
    assert_int_equal(used, 6);
    assert_string_equal(pop3_parser_command(p)->name, "NOOP");
    assert_null(pop3_parser_error(p));
    /* The command stays until the next feed, which frees it. */
    assert_int_equal(pop3_parser_feed(p, "NO", 2, &used), POP3_PARSE_NEED_MORE);
    assert_null(pop3_parser_command(p));
    assert_true(pop3_parser_in_line(p));
    pop3_parser_free(p);
}

static void test_numbers(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_true(pop3_parse_number("0", UINT64_MAX, &v) && v == 0);
    assert_true(pop3_parse_number("42", 100, &v) && v == 42);
    assert_true(pop3_parse_number("007", 100, &v) && v == 7);
    assert_true(pop3_parse_number("4294967295", UINT32_MAX, &v) && v == UINT32_MAX);
    assert_false(pop3_parse_number("4294967296", UINT32_MAX, &v));
    assert_true(pop3_parse_number("18446744073709551615", UINT64_MAX, &v) && v == UINT64_MAX);
    assert_false(pop3_parse_number("18446744073709551616", UINT64_MAX, &v));
    assert_false(pop3_parse_number("000000000000000000001", UINT64_MAX, &v)); /* 21 digits */
    assert_false(pop3_parse_number("", 100, &v));
    assert_false(pop3_parse_number("-1", 100, &v));
    assert_false(pop3_parse_number("+1", 100, &v));
    assert_false(pop3_parse_number(" 1", 100, &v));
    assert_false(pop3_parse_number("1x", 100, &v));
    assert_false(pop3_parse_number("101", 100, &v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands),          cmocka_unit_test(test_errors),
        cmocka_unit_test(test_line_limit),        cmocka_unit_test(test_expect_line),
        cmocka_unit_test(test_reset_after_fatal), cmocka_unit_test(test_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
