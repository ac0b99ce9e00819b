/* Unit tests for clients/warden/warden-protocol.h: escaping round trips of
 * every byte, bad escapes, the line and field limits, every request verb
 * read and written back, field rules (ids, services, users, addresses,
 * times), and replies both ways. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clients/warden/warden-protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parsed line together with the copy its fields point into. */
struct parsed {
    char *copy;
    struct warden_line line;
};

static bool parse_n(const char *text, size_t len, size_t max, struct parsed *p,
                    struct petrel_error *err)
{
    p->copy = malloc(len + 1);
    assert_non_null(p->copy);
    memcpy(p->copy, text, len);
    p->copy[len] = '\n';
    return warden_line_parse(p->copy, len, max, &p->line, err);
}

/* Parses one complete line as written by warden_line_end(). */
static void parse_written(const struct buf *b, struct parsed *p)
{
    assert_true(b->len > 0);
    assert_int_equal(b->data[b->len - 1], '\n');
    assert_null(memchr(b->data, '\n', b->len - 1));
    struct petrel_error err = {0};
    if (!parse_n(b->data, b->len - 1, WARDEN_LINE_MAX, p, &err))
        fail_msg("written line does not parse: %s", err.message);
}

static void expect_line_error(const char *text, size_t len, size_t max, const char *part)
{
    struct parsed p;
    struct petrel_error err = {0};
    bool ok = parse_n(text, len, max, &p, &err);
    free(p.copy);
    if (ok)
        fail_msg("expected a parse error for '%.*s'", (int)len, text);
    if (strstr(err.message, part) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.message, part);
}

static void test_every_byte_round_trips(void **state)
{
    (void)state;
    char all[256];
    size_t n = 0;
    for (int c = 1; c < 256; c++)
        all[n++] = (char)c;
    all[n] = '\0';
    struct buf b = {0};
    warden_line_add(&b, "VERB");
    warden_line_add(&b, all);
    warden_line_add_param(&b, "k\t=", all);
    warden_line_end(&b);
    assert_null(memchr(b.data, '\r', b.len));
    struct parsed p;
    parse_written(&b, &p);
    assert_int_equal(p.line.count, 3);
    assert_string_equal(p.line.fields[1], all);
    assert_memory_equal(p.line.fields[2], "k\t==", 4);
    assert_string_equal(p.line.fields[2] + 4, all);
    free(p.copy);
    buf_free(&b);
}

static void test_bad_lines(void **state)
{
    (void)state;
    expect_line_error("", 0, 100, "empty");
    expect_line_error("A\\", 2, 100, "backslash at the end");
    expect_line_error("A\\x", 3, 100, "bad escape");
    expect_line_error("A\\0", 3, 100, "bad escape");
    expect_line_error("A\0B", 3, 100, "NUL");
    char longline[2000];
    memset(longline, 'a', sizeof(longline));
    expect_line_error(longline, sizeof(longline), 1999, "longer than 1999");
    struct parsed p;
    struct petrel_error err;
    assert_true(parse_n(longline, sizeof(longline), 2000, &p, &err));
    free(p.copy);
    /* WARDEN_MAX_FIELDS fields pass, one more does not. */
    struct buf b = {0};
    for (int i = 0; i < WARDEN_MAX_FIELDS; i++)
        warden_line_add(&b, "f");
    assert_true(parse_n(b.data, b.len, 100, &p, &err));
    assert_int_equal(p.line.count, WARDEN_MAX_FIELDS);
    free(p.copy);
    warden_line_add(&b, "f");
    expect_line_error(b.data, b.len, 100, "more than");
    buf_free(&b);
}

/* Reads `text` (one line without LF) as a request. */
static bool read_request(const char *text, struct parsed *p, struct warden_request *req,
                         const char **id, struct petrel_error *err)
{
    if (!parse_n(text, strlen(text), WARDEN_LINE_MAX, p, err))
        fail_msg("'%s' does not parse: %s", text, err->message);
    return warden_request_read(&p->line, req, id, err);
}

static void expect_request_error(const char *text, const char *part, bool has_id)
{
    struct parsed p;
    struct warden_request req;
    const char *id = NULL;
    struct petrel_error err = {0};
    if (read_request(text, &p, &req, &id, &err))
        fail_msg("expected '%s' to be refused", text);
    if (strstr(err.message, part) == NULL)
        fail_msg("error '%s' for '%s' does not mention '%s'", err.message, text, part);
    assert_true(has_id ? id != NULL : id == NULL);
    free(p.copy);
}

/* Writes `req` and reads it back; the two must agree. */
static void round_trip(const struct warden_request *req)
{
    struct buf b = {0};
    warden_request_write(&b, req);
    struct parsed p;
    parse_written(&b, &p);
    struct warden_request back;
    struct petrel_error err = {0};
    if (!warden_request_read(&p.line, &back, NULL, &err))
        fail_msg("written request '%s' does not read back: %s", b.data, err.message);
    assert_int_equal(back.verb, req->verb);
    assert_string_equal(back.id, req->id);
    assert_int_equal(back.major, req->major);
    assert_int_equal(back.connected_at, req->connected_at);
    assert_int_equal(back.by, req->by);
#define SAME(f)                                                                                    \
    do {                                                                                           \
        if (req->f == NULL)                                                                        \
            assert_true(back.f == NULL || back.f[0] == '\0');                                      \
        else                                                                                       \
            assert_string_equal(back.f, req->f);                                                   \
    } while (0)
    SAME(instance);
    SAME(boot_id);
    SAME(session_id);
    SAME(user);
    SAME(ip);
    SAME(service);
#undef SAME
    free(p.copy);
    buf_free(&b);
}

static void test_requests_round_trip(void **state)
{
    (void)state;
    struct warden_request hello = {.verb = WARDEN_HELLO,
                                   .id = "hello",
                                   .major = 1,
                                   .instance = "imap@mx1:0.0.0.0:143",
                                   .boot_id = "0123abcd"};
    round_trip(&hello);
    struct warden_request connect = {.verb = WARDEN_CONNECT,
                                     .id = "-",
                                     .session_id = "b-1",
                                     .user = "j\xc3\xb6rg=eq@example.org",
                                     .ip = "2001:db8::1",
                                     .service = "pop3",
                                     .connected_at = 1700000000};
    round_trip(&connect);
    connect.ip = "";
    round_trip(&connect);
    struct warden_request disc = {.verb = WARDEN_DISCONNECT, .id = "7", .session_id = "b-1"};
    round_trip(&disc);
    struct warden_request list = {
        .verb = WARDEN_LIST, .id = "8", .service = "imap", .user = "alice=x"};
    round_trip(&list);
    list.service = NULL;
    list.user = NULL;
    round_trip(&list);
    struct warden_request count = {
        .verb = WARDEN_COUNT, .id = "9", .by = WARDEN_BY_USER, .service = "lmtp"};
    round_trip(&count);
    count.by = WARDEN_BY_PROTOCOL;
    round_trip(&count);
    count.by = WARDEN_BY_NONE;
    round_trip(&count);
    struct warden_request pen = {.verb = WARDEN_PENALTY_GET, .id = "10", .ip = "10.0.0.1"};
    round_trip(&pen);
    pen.verb = WARDEN_PENALTY_INC;
    pen.id = "-";
    round_trip(&pen);
    /* an account's failures, from any address */
    pen.ip = "user:j\xc3\xb6rg@example.org";
    round_trip(&pen);
    pen.verb = WARDEN_PENALTY_GET;
    pen.id = "11";
    round_trip(&pen);
}

static void test_request_errors(void **state)
{
    (void)state;
    expect_request_error("HELLO", "request id", false);
    expect_request_error("HELLO\tbad id", "request id", false);
    expect_request_error("FROB\t1", "unknown verb", true);
    expect_request_error("HELLO\t1\t1\tinst", "usage", true);
    expect_request_error("HELLO\t1\tx\tinst\tboot", "version", true);
    expect_request_error("HELLO\t1\t1\tin st\tboot", "instance", true);
    expect_request_error("HELLO\t1\t1\tinst\tbo/ot", "boot id", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.4\timap", "usage", true);
    expect_request_error("CONNECT\t-\ts/1\tu\t1.2.3.4\timap\t1", "session id", true);
    expect_request_error("CONNECT\t-\ts1\t\t1.2.3.4\timap\t1", "user", true);
    expect_request_error("CONNECT\t-\ts1\tu\\n\t1.2.3.4\timap\t1", "user", true);
    expect_request_error("CONNECT\t-\ts1\t\xff\t1.2.3.4\timap\t1", "user", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.400\timap\t1", "IP", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.4\tsmtp\t1", "service", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.4\timap\t-1", "time", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.4\timap\t0123", "time", true);
    expect_request_error("CONNECT\t-\ts1\tu\t1.2.3.4\timap\t253402300800", "time", true);
    expect_request_error("DISCONNECT\t-", "usage", true);
    expect_request_error("LIST\t1\tservice=smtp", "service", true);
    expect_request_error("COUNT\t1\tby=host", "by", true);
    expect_request_error("PENALTY-GET\t1\tlocalhost", "IP", true);
    expect_request_error("PENALTY-INC\t1\t", "IP", true);
    expect_request_error("PENALTY-GET\t1\tuser:", "user:<user>", true);
    expect_request_error("PENALTY-GET\t1\tuser:a\\nb", "user:<user>", true);
    expect_request_error("PENALTY-INC\t1\tuser:\xff", "user:<user>", true);
    expect_request_error("PENALTY-INC\t1\tusr:bob", "IP", true);

    /* Session ids at the limit and one past it. */
    char line[200], sid[WARDEN_SESSION_ID_MAX + 2];
    memset(sid, 'a', WARDEN_SESSION_ID_MAX);
    sid[WARDEN_SESSION_ID_MAX] = '\0';
    snprintf(line, sizeof(line), "DISCONNECT\t-\t%s", sid);
    struct parsed p;
    struct warden_request req;
    struct petrel_error err;
    assert_true(read_request(line, &p, &req, NULL, &err));
    free(p.copy);
    strcat(sid, "a");
    snprintf(line, sizeof(line), "DISCONNECT\t-\t%s", sid);
    expect_request_error(line, "session id", true);

    /* A user of WARDEN_USER_MAX bytes passes, one more byte does not. */
    char *user = malloc(WARDEN_USER_MAX + 2);
    memset(user, 'u', WARDEN_USER_MAX + 1);
    user[WARDEN_USER_MAX] = '\0';
    assert_true(warden_user_valid(user));
    user[WARDEN_USER_MAX] = 'u';
    user[WARDEN_USER_MAX + 1] = '\0';
    assert_false(warden_user_valid(user));
    free(user);

    /* Unknown parameters are ignored; empty filters mean any. */
    assert_true(read_request("LIST\t1\tfuture=1\tservice=\tuser=", &p, &req, NULL, &err));
    assert_null(req.service);
    assert_null(req.user);
    free(p.copy);
}

static void test_field_rules(void **state)
{
    (void)state;
    assert_true(warden_request_id_valid("-"));
    assert_true(warden_request_id_valid("abc.1_2-3"));
    assert_false(warden_request_id_valid(""));
    assert_false(warden_request_id_valid("a:b"));
    assert_false(warden_request_id_valid("0123456789012345678901234567890123"));
    assert_true(warden_service_valid("submission"));
    assert_false(warden_service_valid("IMAP"));
    assert_true(warden_ip_valid("::ffff:1.2.3.4", false));
    assert_true(warden_ip_valid("", true));
    assert_false(warden_ip_valid("", false));
    assert_false(warden_ip_valid("1.2.3", false));
    assert_true(warden_instance_valid("pop3@h:[::1]:110"));
    assert_false(warden_instance_valid("a b"));
    uint64_t v;
    assert_true(warden_parse_uint("0", 10, &v) && v == 0);
    assert_true(warden_parse_uint("18446744073709551615", UINT64_MAX, &v) && v == UINT64_MAX);
    assert_false(warden_parse_uint("18446744073709551616", UINT64_MAX, &v));
    assert_false(warden_parse_uint("11", 10, &v));
    assert_false(warden_parse_uint("+1", 10, &v));
    assert_false(warden_parse_uint("", 10, &v));
}

static void reply_round_trip(const struct warden_reply *r)
{
    struct buf b = {0};
    warden_reply_write(&b, r);
    struct parsed p;
    parse_written(&b, &p);
    struct warden_reply back;
    struct petrel_error err = {0};
    if (!warden_reply_read(&p.line, &back, &err))
        fail_msg("written reply '%s' does not read back: %s", b.data, err.message);
    assert_int_equal(back.kind, r->kind);
    assert_string_equal(back.id, r->id);
    assert_int_equal(back.number, r->number);
    assert_int_equal(back.connected_at, r->connected_at);
    if (r->reason != NULL)
        assert_string_equal(back.reason, r->reason);
    if (r->key != NULL)
        assert_string_equal(back.key, r->key);
    if (r->session_id != NULL) {
        assert_string_equal(back.session_id, r->session_id);
        assert_string_equal(back.user, r->user);
        assert_string_equal(back.ip, r->ip);
        assert_string_equal(back.service, r->service);
    }
    free(p.copy);
    buf_free(&b);
}

static void test_replies(void **state)
{
    (void)state;
    struct warden_reply ok = {.kind = WARDEN_REPLY_OK, .id = "hello", .number = 1};
    reply_round_trip(&ok);
    ok.number = 0;
    reply_round_trip(&ok);
    struct warden_reply error = {.kind = WARDEN_REPLY_ERROR, .id = "-", .reason = "a\tb\nc"};
    reply_round_trip(&error);
    struct warden_reply session = {.kind = WARDEN_REPLY_SESSION,
                                   .id = "3",
                                   .session_id = "x-1",
                                   .user = "bob",
                                   .ip = "",
                                   .service = "imap",
                                   .connected_at = 5};
    reply_round_trip(&session);
    struct warden_reply item = {.kind = WARDEN_REPLY_ITEM, .id = "4", .key = "alice", .number = 12};
    reply_round_trip(&item);
    struct warden_reply done = {.kind = WARDEN_REPLY_DONE, .id = "4", .number = UINT64_MAX};
    reply_round_trip(&done);
    struct warden_reply pen = {.kind = WARDEN_REPLY_PENALTY, .id = "5", .number = 3};
    reply_round_trip(&pen);

    static const char *const bad[] = {
        "OK",
        "NOPE\t1",
        "OK\t1\tx",
        "ITEM\t1\t\t3",
        "ITEM\t1\tk",
        "DONE\t1",
        "PENALTY\t1\t-1",
        "SESSION\t1\ts\tu\t1.2.3.4\timap",
        "SESSION\t1\ts\tu\tbad\timap\t1",
        "SESSION\t1\ts\t\t\timap\t1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct parsed p;
        struct petrel_error err = {0};
        assert_true(parse_n(bad[i], strlen(bad[i]), WARDEN_LINE_MAX, &p, &err));
        struct warden_reply r;
        if (warden_reply_read(&p.line, &r, &err))
            fail_msg("reply '%s' should be refused", bad[i]);
        assert_true(err.message[0] != '\0');
        free(p.copy);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte_round_trips),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_requests_round_trip),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_field_rules),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
