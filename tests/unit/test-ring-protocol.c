/* The ring protocol codec (clients/ring/ring-protocol.c): splitting,
 * escaping, decoding every message, rejecting malformed fields, and
 * writing messages that decode back to themselves. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "clients/ring/ring-protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses a copy of `text` (no LF); the copy lives in *keep (caller frees). */
static bool parse(const char *text, struct ring_msg *m, struct petrel_error *err, char **keep,
                  struct ring_line *fields)
{
    size_t len = strlen(text);
    *keep = malloc(len + 1);
    memcpy(*keep, text, len + 1);
    return ring_msg_parse(*keep, len, RING_LINE_MAX_DEFAULT, fields, m, err);
}

static void expect_ok(const char *text, enum ring_msg_type type)
{
    struct ring_msg m;
    struct ring_line f;
    struct petrel_error err = {0};
    char *keep;
    if (!parse(text, &m, &err, &keep, &f))
        fail_msg("'%s' rejected: %s", text, err.message);
    assert_int_equal(m.type, type);
    free(keep);
}

static void expect_bad(const char *text, enum petrel_error_code code)
{
    struct ring_msg m;
    struct ring_line f;
    struct petrel_error err = {0};
    char *keep;
    if (parse(text, &m, &err, &keep, &f))
        fail_msg("'%s' accepted", text);
    assert_int_equal(err.code, code);
    free(keep);
}

static void test_split_and_escapes(void **state)
{
    (void)state;
    char line[] = "A\\tB\tC\\\\D\t\\nE\\r\t";
    struct ring_line f;
    struct petrel_error err;
    assert_true(ring_line_split(line, strlen(line), 100, &f, &err));
    assert_int_equal(f.count, 4);
    assert_string_equal(f.fields[0], "A\tB");
    assert_string_equal(f.fields[1], "C\\D");
    assert_string_equal(f.fields[2], "\nE\r");
    assert_string_equal(f.fields[3], "");

    char bad1[] = "A\\x";
    assert_false(ring_line_split(bad1, 3, 100, &f, &err));
    char bad2[] = "A\\";
    assert_false(ring_line_split(bad2, 2, 100, &f, &err));
    char bad3[] = "A\\0";
    assert_false(ring_line_split(bad3, 3, 100, &f, &err));
    char nul[] = {'A', '\0', 'B', '\0'};
    assert_false(ring_line_split(nul, 3, 100, &f, &err));
    char empty[] = "";
    assert_false(ring_line_split(empty, 0, 100, &f, &err));
    char longer[] = "0123456789";
    assert_false(ring_line_split(longer, 10, 9, &f, &err));
    assert_non_null(strstr(err.message, "longer than 9"));
    assert_true(ring_line_split(longer, 10, 10, &f, &err));

    char many[RING_MAX_FIELDS * 2 + 8];
    size_t n = 0;
    for (int i = 0; i < RING_MAX_FIELDS; i++) {
        many[n++] = 'x';
        many[n++] = '\t';
    }
    many[n++] = 'x';
    many[n] = '\0';
    assert_false(ring_line_split(many, n, sizeof(many), &f, &err));
    assert_non_null(strstr(err.message, "fields"));
}

static void test_every_message_decodes(void **state)
{
    (void)state;
    expect_ok("VERSION\tpetrel-ring\t1\t0", RING_MSG_VERSION);
    expect_ok("VERSION\tpetrel-ring\t2\t7\tx=y", RING_MSG_VERSION);
    expect_ok("HELLO\tlogin\tproxy-1", RING_MSG_HELLO);
    expect_ok("HELLO\tmonitor\tmonitor 0", RING_MSG_HELLO);
    expect_ok("HELLO\tdirector\t10.0.0.1:9102", RING_MSG_HELLO);
    expect_ok("HOST\t10.0.0.5\t143\t\t100\tup\t1718000000", RING_MSG_HOST);
    expect_ok("HOST\tfd00::5\t993\tblue\t0\tflush\t0", RING_MSG_HOST);
    expect_ok("DONE", RING_MSG_DONE);
    expect_ok("RING-CHANGE\tup\t10.0.0.5\t143\t\t100\t5\t10.0.0.1:9102\t1", RING_MSG_RING_CHANGE);
    expect_ok("RING-CHANGE\tdown\t::1\t143\tt\t1\t5\t[::1]:9102\t18446744073709551615",
              RING_MSG_RING_CHANGE);
    expect_ok("USER-MOVED\tdemo\t42\t10.0.0.5\t143\t10.0.0.1:9102\t9", RING_MSG_USER_MOVED);
    expect_ok("USER-KICKED\tdemo\t4294967295\t10.0.0.1:9102\t9", RING_MSG_USER_KICKED);
    expect_ok("LOOKUP\t1\tdemo", RING_MSG_LOOKUP);
    expect_ok("LOOKUP\ta.b-C_9\tdemo\ttag=blue\tfuture=1", RING_MSG_LOOKUP);
    expect_ok("LOOKUP-OK\t1\t10.0.0.5\t143\t\tsticky", RING_MSG_LOOKUP_OK);
    expect_ok("LOOKUP-FAIL\t1\tkilling\tretry_ms=200", RING_MSG_LOOKUP_FAIL);
    expect_ok("LOOKUP-FAIL\t1\tno_backends\terror=none up", RING_MSG_LOOKUP_FAIL);
    expect_ok("SESSION-START\ts1\tdemo\t10.0.0.5\timaps", RING_MSG_SESSION_START);
    expect_ok("SESSION-END\ts1", RING_MSG_SESSION_END);
    expect_ok("BACKEND-FLUSH\t10.0.0.5", RING_MSG_BACKEND_FLUSH);
    expect_ok("BACKEND-FLUSH\t10.0.0.5\treason=imap login failed 7/10", RING_MSG_BACKEND_FLUSH);
    expect_ok("BACKEND-UP\t10.0.0.5", RING_MSG_BACKEND_UP);
    expect_ok("PING", RING_MSG_PING);
    expect_ok("PING\tabc", RING_MSG_PING);
    expect_ok("PONG\tabc", RING_MSG_PONG);
    expect_ok("ERROR\tsomething", RING_MSG_ERROR);
}

static void test_fields_are_typed(void **state)
{
    (void)state;
    struct ring_msg m;
    struct ring_line f;
    struct petrel_error err;
    char *keep;
    assert_true(parse("RING-CHANGE\tflush\t10.0.0.5\t143\tblue\t300\t1718000000\t"
                      "[fd00::1]:9102\t77",
                      &m, &err, &keep, &f));
    assert_int_equal(m.ring_change.change, RING_CHANGE_FLUSH);
    assert_int_equal(m.ring_change.host.state, RING_STATE_FLUSH);
    assert_string_equal(m.ring_change.host.ip, "10.0.0.5");
    assert_int_equal(m.ring_change.host.port, 143);
    assert_string_equal(m.ring_change.host.tag, "blue");
    assert_int_equal(m.ring_change.host.vhosts, 300);
    assert_int_equal(m.ring_change.host.last_updown_change, 1718000000);
    assert_string_equal(m.ring_change.origin, "[fd00::1]:9102");
    assert_int_equal(m.ring_change.seq, 77);
    free(keep);

    assert_true(
        parse("LOOKUP\t7\tDemo\\tUser\tother=1\ttag=g\\\\x\ttag=second", &m, &err, &keep, &f));
    assert_string_equal(m.lookup.id, "7");
    assert_string_equal(m.lookup.user, "Demo\tUser");
    assert_string_equal(m.lookup.tag, "g\\x"); /* the first tag= counts */
    free(keep);

    assert_true(parse("LOOKUP-FAIL\t9\tkilling\tretry_ms=250", &m, &err, &keep, &f));
    assert_int_equal(m.lookup_fail.outcome, RING_OUTCOME_KILLING);
    assert_int_equal(m.lookup_fail.retry_ms, 250);
    assert_null(m.lookup_fail.error);
    free(keep);

    assert_true(parse("SESSION-START\tx\tu\t::ffff:10.0.0.1\tpop3s", &m, &err, &keep, &f));
    assert_int_equal(m.session_start.protocol, RING_PROTO_POP3S);
    free(keep);
}

static void test_malformed_fields(void **state)
{
    (void)state;
    expect_bad("NOPE\tx", PETREL_ERR_UNSUPPORTED);
    expect_bad("lookup\t1\tdemo", PETREL_ERR_UNSUPPORTED); /* verbs are upper case */
    expect_bad("VERSION\tother\t1\t0", PETREL_ERR_INVALID);
    expect_bad("VERSION\tpetrel-ring\t1", PETREL_ERR_INVALID);
    expect_bad("VERSION\tpetrel-ring\t-1\t0", PETREL_ERR_INVALID);
    expect_bad("VERSION\tpetrel-ring\t+1\t0", PETREL_ERR_INVALID);
    expect_bad("VERSION\tpetrel-ring\t4294967296\t0", PETREL_ERR_INVALID);
    expect_bad("HELLO\tproxy\tx", PETREL_ERR_INVALID);
    expect_bad("HELLO\tlogin\t", PETREL_ERR_INVALID);
    expect_bad("HOST\t10.0.0.256\t143\t\t1\tup\t0", PETREL_ERR_INVALID);
    expect_bad("HOST\t10.0.0.5\t0\t\t1\tup\t0", PETREL_ERR_INVALID);
    expect_bad("HOST\t10.0.0.5\t65536\t\t1\tup\t0", PETREL_ERR_INVALID);
    expect_bad("HOST\t10.0.0.5\t143\t\t1\tdown\t0", PETREL_ERR_INVALID);
    expect_bad("HOST\t10.0.0.5\t143\t\t1\tup\t1e9", PETREL_ERR_INVALID);
    expect_bad("HOST\t[::1]\t143\t\t1\tup\t0", PETREL_ERR_INVALID);
    expect_bad("HOST\texample.com\t143\t\t1\tup\t0", PETREL_ERR_INVALID);
    expect_bad("RING-CHANGE\tsideways\t10.0.0.5\t143\t\t1\t0\t10.0.0.1:9102\t1",
               PETREL_ERR_INVALID);
    expect_bad("RING-CHANGE\tup\t10.0.0.5\t143\t\t1\t0\t10.0.0.1\t1", PETREL_ERR_INVALID);
    expect_bad("RING-CHANGE\tup\t10.0.0.5\t143\t\t1\t0\t::1:9102\t1", PETREL_ERR_INVALID);
    expect_bad("RING-CHANGE\tup\t10.0.0.5\t143\t\t1\t0\t10.0.0.1:9102\t0", PETREL_ERR_INVALID);
    expect_bad("RING-CHANGE\tup\t10.0.0.5\t143\t\t1\t0\t10.0.0.1:9102\t18446744073709551616",
               PETREL_ERR_INVALID);
    expect_bad("USER-MOVED\tdemo\t0\t10.0.0.5\t143\t10.0.0.1:9102\t1", PETREL_ERR_INVALID);
    expect_bad("USER-KICKED\t\t5\t10.0.0.1:9102\t1", PETREL_ERR_INVALID);
    expect_bad("LOOKUP\t\tdemo", PETREL_ERR_INVALID);
    expect_bad("LOOKUP\ta b\tdemo", PETREL_ERR_INVALID);
    expect_bad("LOOKUP\t123456789012345678901234567890123\tdemo", PETREL_ERR_INVALID);
    expect_bad("LOOKUP\t1", PETREL_ERR_INVALID);
    expect_bad("LOOKUP\t1\t", PETREL_ERR_INVALID);
    expect_bad("LOOKUP-OK\t1\t10.0.0.5\t143\t\tkilling", PETREL_ERR_INVALID);
    expect_bad("LOOKUP-FAIL\t1\tsticky", PETREL_ERR_INVALID);
    expect_bad("LOOKUP-FAIL\t1\tkilling\tretry_ms=x", PETREL_ERR_INVALID);
    expect_bad("SESSION-START\ts\tu\t10.0.0.5\tsmtp", PETREL_ERR_INVALID);
    expect_bad("SESSION-END", PETREL_ERR_INVALID);
    expect_bad("BACKEND-FLUSH", PETREL_ERR_INVALID);
    expect_bad("BACKEND-UP\tlocalhost", PETREL_ERR_INVALID);
    expect_bad("PING\ta\tb", PETREL_ERR_INVALID);
    expect_bad("ERROR", PETREL_ERR_INVALID);

    /* Names are bounded. */
    char line[600];
    int n = snprintf(line, sizeof(line), "LOOKUP\t1\t");
    memset(line + n, 'u', RING_NAME_MAX);
    line[n + RING_NAME_MAX] = '\0';
    expect_ok(line, RING_MSG_LOOKUP);
    line[n + RING_NAME_MAX] = 'u';
    line[n + RING_NAME_MAX + 1] = '\0';
    expect_bad(line, PETREL_ERR_INVALID);
}

/* write(decode(x)) decodes to the same message, whatever the fields hold. */
static void roundtrip(const struct ring_msg *m)
{
    struct buf out = {0};
    ring_msg_write(&out, m);
    assert_true(out.len > 0 && out.data[out.len - 1] == '\n');
    assert_null(memchr(out.data, '\n', out.len - 1)); /* one line */
    struct ring_msg back;
    struct ring_line f;
    struct petrel_error err;
    if (!ring_msg_parse(out.data, out.len - 1, RING_LINE_MAX_DEFAULT, &f, &back, &err))
        fail_msg("'%s' does not parse back: %s", out.data, err.message);
    assert_int_equal(back.type, m->type);
    struct buf again = {0};
    ring_msg_write(&again, &back);
    /* ring_msg_parse modified out.data in place: compare with a fresh write */
    struct buf first = {0};
    ring_msg_write(&first, m);
    assert_string_equal(first.data, again.data);
    buf_free(&out);
    buf_free(&again);
    buf_free(&first);
}

static void test_write_roundtrip(void **state)
{
    (void)state;
    struct ring_msg m = {.type = RING_MSG_HOST};
    m.host = (struct ring_host){.ip = "fd00::5",
                                .port = 10143,
                                .tag = "t\tab\\x\ny\r",
                                .vhosts = 4000000000u,
                                .state = RING_STATE_FLUSH,
                                .last_updown_change = 1718000000};
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_RING_CHANGE};
    m.ring_change.change = RING_CHANGE_DOWN;
    m.ring_change.host = (struct ring_host){.ip = "10.0.0.1", .port = 1, .tag = ""};
    m.ring_change.origin = "10.0.0.9:9102";
    m.ring_change.seq = UINT64_MAX;
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_USER_MOVED};
    m.user_moved.user = "a\tb\\c";
    m.user_moved.hash = 1;
    m.user_moved.ip = "::1";
    m.user_moved.port = 65535;
    m.user_moved.origin = "[::1]:9102";
    m.user_moved.seq = 3;
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_LOOKUP};
    m.lookup.id = "x";
    m.lookup.user = "tag=blue"; /* positional: never mistaken for the parameter */
    m.lookup.tag = "=\t=";
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_LOOKUP_FAIL};
    m.lookup_fail.id = "9";
    m.lookup_fail.outcome = RING_OUTCOME_BAD_REQUEST;
    m.lookup_fail.error = "user\nempty";
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_BACKEND_FLUSH};
    m.backend_flush.ip = "10.0.0.1";
    m.backend_flush.reason = "3 of 10\tfailed";
    roundtrip(&m);
    m = (struct ring_msg){.type = RING_MSG_PING};
    roundtrip(&m);
    m.ping.token = "";
    roundtrip(&m);

    struct buf v = {0};
    ring_write_version(&v);
    ring_write_hello(&v, RING_KIND_MONITOR, "mon\t1");
    assert_string_equal(v.data, "VERSION\tpetrel-ring\t1\t1\nHELLO\tmonitor\tmon\\t1\n");
    buf_free(&v);
}

static void test_names(void **state)
{
    (void)state;
    enum ring_outcome o;
    for (int i = 0; i < RING_OUTCOME_COUNT; i++) {
        assert_true(ring_outcome_parse(ring_outcome_name((enum ring_outcome)i), &o));
        assert_int_equal(o, i);
    }
    enum ring_session_protocol p;
    for (int i = 0; i < RING_PROTO_COUNT; i++) {
        assert_true(ring_protocol_parse(ring_protocol_name((enum ring_session_protocol)i), &p));
        assert_int_equal(p, i);
    }
    assert_false(ring_outcome_parse("STICKY", &o));
    assert_true(ring_ip_valid("0.0.0.0"));
    assert_false(ring_ip_valid("1.2.3"));
    assert_false(ring_ip_valid("fe80::1%eth0"));
    assert_true(ring_id_valid("abcdefghijABCDEFGHIJ0123456789_."));
    assert_false(ring_id_valid(""));
    assert_false(ring_id_valid("a/b"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_escapes), cmocka_unit_test(test_every_message_decodes),
        cmocka_unit_test(test_fields_are_typed),  cmocka_unit_test(test_malformed_fields),
        cmocka_unit_test(test_write_roundtrip),   cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
