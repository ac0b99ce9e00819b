/* Unit tests for the LMTP grammar: protocols/lmtp/lmtp-parser.h (verbs,
 * paths, ESMTP parameters, address formatting), lmtp-recipient.h (detail
 * and userdb name) and lmtp-data.h (the DATA stream: dot-unstuffing, the
 * end marker, the size limit), each fed whole, byte by byte and in
 * pieces. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-parser.h"
#include "protocols/lmtp/lmtp-recipient.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses a copy of `text`; the copy lives until the next call. */
static char line_buf[4096];

static bool parse(const char *text, struct lmtp_command *cmd, struct lmtp_reply_error *err)
{
    size_t len = strlen(text);
    assert_true(len < sizeof(line_buf));
    memcpy(line_buf, text, len + 1);
    return lmtp_parse_command(line_buf, len, cmd, err);
}

static void assert_slice(struct lmtp_slice s, const char *want)
{
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

static void assert_error(const char *text, int code, const char *enhanced)
{
    struct lmtp_command cmd;
    struct lmtp_reply_error e = {0};
    if (parse(text, &cmd, &e)) {
        print_error("parsed, expected %d %s: %s\n", code, enhanced, text);
        fail();
    }
    if (e.code != code || strcmp(e.enhanced, enhanced) != 0) {
        print_error("%s: got %d %s %s, want %d %s\n", text, e.code, e.enhanced, e.text, code,
                    enhanced);
        fail();
    }
}

static void test_verbs(void **state)
{
    (void)state;
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    assert_true(parse("LHLO mx.example.org", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_LHLO);
    assert_slice(cmd.arg, "mx.example.org");
    assert_true(parse("lhlo  [127.0.0.1]", &cmd, &e));
    assert_slice(cmd.arg, "[127.0.0.1]");
    assert_true(parse("data", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_DATA);
    assert_true(parse("NoOp anything at all", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_NOOP);
    assert_true(parse("VRFY bob", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_VRFY);
    assert_true(parse("STARTTLS", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_STARTTLS);
    assert_true(parse("EHLO x", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_EHLO);
    assert_error("FROB x", 500, "5.5.2");
    assert_error("", 500, "5.5.2");
    assert_error(" LHLO x", 500, "5.5.2");
    assert_error("LHLO", 501, "5.5.4");
    assert_error("DATA x", 501, "5.5.4");
    assert_error("QUIT now", 501, "5.5.4");
    assert_error("RSET x", 501, "5.5.4");
    assert_error("NOOP \x01", 500, "5.5.2");
    /* NUL inside the line */
    struct lmtp_reply_error err;
    char nul[] = "NOOP a\0b";
    assert_false(lmtp_parse_command(nul, sizeof(nul) - 1, &cmd, &err));
    assert_int_equal(err.code, 500);
}

static void test_paths(void **state)
{
    (void)state;
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    assert_true(parse("MAIL FROM:<alice@example.org>", &cmd, &e));
    assert_int_equal(cmd.verb, LMTP_VERB_MAIL);
    assert_false(cmd.path.null);
    assert_slice(cmd.path.local, "alice");
    assert_slice(cmd.path.domain, "example.org");
    assert_int_equal(cmd.param_count, 0);

    assert_true(parse("mail from: <>", &cmd, &e));
    assert_true(cmd.path.null);

    assert_true(parse("RCPT TO:<\"john \\\"q\\\" public\"@example.org>", &cmd, &e));
    assert_true(cmd.path.quoted);
    assert_slice(cmd.path.local, "john \"q\" public");
    assert_slice(cmd.path.domain, "example.org");

    assert_true(parse("RCPT TO:<@relay1.example,@relay2.example:bob@example.org>", &cmd, &e));
    assert_slice(cmd.path.local, "bob");
    assert_slice(cmd.path.domain, "example.org");

    assert_true(parse("RCPT TO:<postmaster>", &cmd, &e));
    assert_slice(cmd.path.local, "postmaster");
    assert_int_equal(cmd.path.domain.len, 0);

    assert_true(parse("RCPT TO:<a@[192.0.2.1]>", &cmd, &e));
    assert_slice(cmd.path.domain, "[192.0.2.1]");

    assert_true(parse("RCPT TO:<j\xc3\xb6rg@b\xc3\xbc"
                      "cher.example>",
                      &cmd, &e));
    assert_true(cmd.path.utf8);
    assert_slice(cmd.path.local, "j\xc3\xb6rg");

    assert_true(parse("RCPT TO:<a.b+c-d@sub.example.org>", &cmd, &e));
    assert_false(cmd.path.utf8);
    assert_slice(cmd.path.local, "a.b+c-d");

    assert_error("MAIL FROM:alice@example.org", 501, "5.1.7");
    assert_error("MAIL FROM:<alice>", 501, "5.1.7");
    assert_error("MAIL alice", 501, "5.5.4");
    assert_error("RCPT TO:<>", 501, "5.1.3");
    assert_error("RCPT TO:<a@b", 501, "5.1.3");
    assert_error("RCPT TO:<a b@c>", 501, "5.1.3");
    assert_error("RCPT TO:<a@b..c>", 501, "5.1.3");
    assert_error("RCPT TO:<a@-b.c_d>", 501, "5.1.3");
    assert_error("RCPT TO:<\"unterminated@b>", 501, "5.1.3");
    assert_error("RCPT TO:<\"a\\\x7f\"@b>", 500, "5.5.2");
    assert_error("RCPT TO:<a@[]>", 501, "5.1.3");
    assert_error("RCPT TO:<\xc3(@b>", 501, "5.1.3");    /* invalid UTF-8 */
    assert_error("RCPT TO:<\xc0\x80@b>", 501, "5.1.3"); /* overlong NUL */
    assert_error("RCPT TO:<@relay:>", 501, "5.1.3");
    assert_error("RCPT TO:<a@b>x", 501, "5.5.4");

    /* Length limits on the decoded parts. */
    char line[1024];
    snprintf(line, sizeof(line), "RCPT TO:<%0*d@example.org>", LMTP_MAX_LOCAL_PART, 0);
    assert_true(parse(line, &cmd, &e));
    snprintf(line, sizeof(line), "RCPT TO:<%0*d@example.org>", LMTP_MAX_LOCAL_PART + 1, 0);
    assert_error(line, 501, "5.1.3");
    char domain[LMTP_MAX_DOMAIN + 2];
    memset(domain, 'd', sizeof(domain) - 1);
    domain[sizeof(domain) - 1] = '\0';
    snprintf(line, sizeof(line), "RCPT TO:<a@%s>", domain);
    assert_error(line, 501, "5.1.3");
    domain[LMTP_MAX_DOMAIN] = '\0';
    snprintf(line, sizeof(line), "RCPT TO:<a@%s>", domain);
    assert_true(parse(line, &cmd, &e));
}

static void test_params(void **state)
{
    (void)state;
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    struct lmtp_mail_params mp;
    assert_true(parse("MAIL FROM:<a@b.c> SIZE=12345 BODY=8BITMIME  SMTPUTF8", &cmd, &e));
    assert_int_equal(cmd.param_count, 3);
    assert_slice(cmd.params[0].keyword, "SIZE");
    assert_slice(cmd.params[0].value, "12345");
    assert_false(cmd.params[2].has_value);
    assert_true(lmtp_mail_params_parse(&cmd, &mp, &e));
    assert_true(mp.has_size);
    assert_int_equal(mp.size, 12345);
    assert_int_equal(mp.body, LMTP_BODY_8BITMIME);
    assert_true(mp.smtputf8);

    assert_true(parse("MAIL FROM:<a@b.c> size=1 body=7bit", &cmd, &e));
    assert_true(lmtp_mail_params_parse(&cmd, &mp, &e));
    assert_int_equal(mp.body, LMTP_BODY_7BIT);

    static const struct {
        const char *line;
        int code;
    } bad[] = {
        {"MAIL FROM:<a@b.c> SIZE=x1", 501},
        {"MAIL FROM:<a@b.c> SIZE=", 501},
        {"MAIL FROM:<a@b.c> SIZE=1 SIZE=2", 501},
        {"MAIL FROM:<a@b.c> SIZE=99999999999999999999999", 501},
        {"MAIL FROM:<a@b.c> SIZE", 501},
        {"MAIL FROM:<a@b.c> BODY=BINARYMIME", 555},
        {"MAIL FROM:<a@b.c> BODY=8BITMIME BODY=7BIT", 501},
        {"MAIL FROM:<a@b.c> SMTPUTF8=yes", 501},
        {"MAIL FROM:<a@b.c> RET=FULL", 555},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct lmtp_command c;
        bool parsed = parse(bad[i].line, &c, &e);
        if (parsed)
            parsed = lmtp_mail_params_parse(&c, &mp, &e);
        if (parsed || e.code != bad[i].code) {
            print_error("%s: parsed=%d code=%d\n", bad[i].line, (int)parsed, e.code);
            fail();
        }
    }
    assert_error("MAIL FROM:<a@b.c> =x", 501, "5.5.4");
    assert_error("MAIL FROM:<a@b.c> A=b=c", 501, "5.5.4");
    /* One parameter more than the limit. */
    struct buf line = {0};
    buf_append_str(&line, "MAIL FROM:<a@b.c>");
    for (int i = 0; i <= LMTP_MAX_PARAMS; i++)
        buf_printf(&line, " P%d=v", i);
    assert_error(line.data, 555, "5.5.4");
    buf_free(&line);
    struct buf ok = {0};
    buf_append_str(&ok, "MAIL FROM:<a@b.c>");
    for (int i = 0; i < LMTP_MAX_PARAMS; i++)
        buf_printf(&ok, " P%d=v", i);
    assert_true(parse(ok.data, &cmd, &e));
    assert_int_equal(cmd.param_count, LMTP_MAX_PARAMS);
    buf_free(&ok);
}

static void assert_format(const char *rcpt_line, const char *want)
{
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    assert_true(parse(rcpt_line, &cmd, &e));
    struct buf out = {0};
    lmtp_path_format(&cmd.path, &out);
    assert_string_equal(out.data != NULL ? out.data : "", want);
    /* and back */
    char again[600];
    snprintf(again, sizeof(again), "RCPT TO:<%s>", out.data);
    struct lmtp_command c2;
    assert_true(parse(again, &c2, &e));
    buf_free(&out);
}

static void test_format(void **state)
{
    (void)state;
    assert_format("RCPT TO:<alice@example.org>", "alice@example.org");
    assert_format("RCPT TO:<\"alice\"@example.org>", "alice@example.org");
    assert_format("RCPT TO:<\"a b\"@example.org>", "\"a b\"@example.org");
    assert_format("RCPT TO:<\"a\\\\b\\\"c\"@x>", "\"a\\\\b\\\"c\"@x");
    assert_format("RCPT TO:<a..b@x>", "\"a..b\"@x");
    assert_format("RCPT TO:<.a@x>", "\".a\"@x");
    assert_format("RCPT TO:<postmaster>", "postmaster");
    assert_true(lmtp_is_dot_string("a.b", 3));
    assert_false(lmtp_is_dot_string("a.", 2));
    assert_false(lmtp_is_dot_string("", 0));
    assert_false(lmtp_is_dot_string("a b", 3));
}

static void assert_recipient(const char *path, const char *delims, const char *format,
                             const char *address, const char *lookup, const char *detail)
{
    struct lmtp_command cmd;
    struct lmtp_reply_error e;
    char line[512];
    snprintf(line, sizeof(line), "RCPT TO:<%s>", path);
    assert_true(parse(line, &cmd, &e));
    struct lmtp_recipient_name n;
    lmtp_recipient_name_make(&cmd.path, delims, format, &n);
    assert_string_equal(n.address, address);
    assert_string_equal(n.lookup, lookup);
    if (detail == NULL)
        assert_null(n.detail);
    else
        assert_string_equal(n.detail, detail);
    lmtp_recipient_name_free(&n);
}

static void test_recipient(void **state)
{
    (void)state;
    assert_recipient("alice+Work@Example.ORG", "+", "%u", "alice+Work@Example.ORG",
                     "alice@example.org", "Work");
    assert_recipient("alice+Work@example.org", "+", "%n", "alice+Work@example.org", "alice",
                     "Work");
    assert_recipient("alice-lists+x@example.org", "+-", "%n", "alice-lists+x@example.org", "alice",
                     "lists+x");
    assert_recipient("alice+Work@example.org", "", "%n", "alice+Work@example.org", "alice+Work",
                     NULL);
    assert_recipient("+Work@example.org", "+", "%n", "+Work@example.org", "+Work", NULL);
    assert_recipient("alice+@example.org", "+", "%n", "alice+@example.org", "alice", NULL);
    assert_recipient("bob@example.org", "+", "%d/%n%%", "bob@example.org", "example.org/bob%",
                     NULL);
    assert_recipient("postmaster", "+", "%u", "postmaster", "postmaster", NULL);
    assert_recipient("\"a b+c\"@x", "+", "%n", "\"a b+c\"@x", "a b", "c");
}

/* ---------- DATA ---------- */

struct fed {
    struct buf out;
    size_t consumed;
    bool done;
    bool too_big;
    uint64_t size;
};

static void feed(const char *in, size_t len, uint64_t max, size_t step, struct fed *f)
{
    memset(f, 0, sizeof(*f));
    struct lmtp_data d;
    lmtp_data_init(&d, &f->out, max);
    size_t pos = 0;
    while (pos < len && !f->done) {
        size_t piece = step == 0 || step > len - pos ? len - pos : step;
        char *copy = malloc(piece);
        memcpy(copy, in + pos, piece);
        size_t used = 0;
        f->done = lmtp_data_feed(&d, copy, piece, &used);
        free(copy);
        pos += used;
    }
    f->consumed = pos;
    f->too_big = d.too_big;
    f->size = d.size;
}

/* The same result whole, byte by byte and in 3-byte pieces. */
static void assert_data(const char *in, uint64_t max, const char *want, size_t want_consumed,
                        bool want_done)
{
    size_t len = strlen(in);
    static const size_t steps[] = {0, 1, 3};
    for (size_t i = 0; i < 3; i++) {
        struct fed f;
        feed(in, len, max, steps[i], &f);
        assert_int_equal(f.done, want_done);
        assert_int_equal(f.consumed, want_consumed);
        assert_false(f.too_big);
        assert_int_equal(f.out.len, strlen(want));
        if (f.out.len > 0)
            assert_memory_equal(f.out.data, want, f.out.len);
        buf_free(&f.out);
    }
}

static void test_data(void **state)
{
    (void)state;
    assert_data("a\r\nb\r\n.\r\nNOOP\r\n", 100, "a\r\nb\r\n", 9, true);
    assert_data(".\r\n", 100, "", 3, true);
    assert_data("..x\r\n.\r\n", 100, ".x\r\n", 8, true);
    assert_data(".x\r\n.\r\n", 100, "x\r\n", 7, true);
    assert_data("...\r\n.\r\n", 100, "..\r\n", 8, true);
    /* Only CRLF ends lines: bare LF and CR are content. */
    assert_data("a\n.\nb\r\n.\r\n", 100, "a\n.\nb\r\n", 10, true);
    assert_data("a\r.\r\n.\r\n", 100, "a\r.\r\n", 8, true);
    assert_data(".\r\r\n.\r\n", 100, "\r\r\n", 7, true);
    assert_data("a\r\n.", 100, "a\r\n", 4, false);
    assert_data("a\r\n.\r", 100, "a\r\n", 5, false);
    assert_data("8bit \xc3\xa9\x80\xff\r\n.\r\n", 100, "8bit \xc3\xa9\x80\xff\r\n", 14, true);

    /* Over the limit: read to the end all the same, flagged. */
    for (size_t step = 0; step < 4; step++) {
        struct fed f;
        const char *in = "0123456789\r\n..x\r\n.\r\nRSET\r\n";
        feed(in, strlen(in), 10, step, &f);
        assert_true(f.done);
        assert_true(f.too_big);
        assert_int_equal(f.consumed, 20);
        assert_int_equal(f.size, 16);
        buf_free(&f.out);
        feed(in, strlen(in), 16, step, &f);
        assert_false(f.too_big);
        assert_int_equal(f.out.len, 16);
        buf_free(&f.out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verbs),     cmocka_unit_test(test_paths),
        cmocka_unit_test(test_params),    cmocka_unit_test(test_format),
        cmocka_unit_test(test_recipient), cmocka_unit_test(test_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
