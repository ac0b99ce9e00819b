/* Unit tests for services/monitor/monitor-dialog.h: the IMAP, POP3 and LMTP
 * probe conversations line by line, with and without credentials, and
 * every way a server can fail them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/monitor/monitor-dialog.h"

#include <string.h>

/* Feeds `line`; checks the action and what the monitor sends ("" = nothing). */
static void step(struct monitor_dialog *d, const char *line, enum monitor_dialog_action want,
                 const char *sent)
{
    struct buf out = {0};
    enum monitor_dialog_action a = monitor_dialog_line(d, line, strlen(line), &out);
    if (a != want)
        fail_msg("after '%s': action %d, expected %d", line, a, want);
    if (strcmp(buf_cstr(&out), sent) != 0)
        fail_msg("after '%s': sent '%s', expected '%s'", line, buf_cstr(&out), sent);
    buf_free(&out);
}

static void verdict(const struct monitor_dialog *d, enum monitor_result r)
{
    assert_true(d->decided);
    if (d->verdict != r)
        fail_msg("verdict %s, expected %s (detail '%s')", monitor_result_name(d->verdict),
                 monitor_result_name(r), d->detail);
}

static void test_imap_login(void **state)
{
    (void)state;
    struct monitor_dialog d;
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "pa\"ss\\word");
    step(&d, "* OK [CAPABILITY IMAP4rev1] ready", MONITOR_DIALOG_READ,
         "m1 LOGIN \"probe\" \"pa\\\"ss\\\\word\"\r\n");
    assert_false(d.decided);
    step(&d, "* CAPABILITY IMAP4rev1 IDLE", MONITOR_DIALOG_READ, "");
    step(&d, "m1 ok Logged in", MONITOR_DIALOG_READ, "m2 LOGOUT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
    step(&d, "* BYE Logging out", MONITOR_DIALOG_READ, "");
    step(&d, "m2 OK Logout completed", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_OK);
}

static void test_imap_login_failures(void **state)
{
    (void)state;
    struct monitor_dialog d;
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    step(&d, "m1 NO [AUTHENTICATIONFAILED] Authentication failed.", MONITOR_DIALOG_READ,
         "m2 LOGOUT\r\n");
    verdict(&d, MONITOR_RESULT_REJECTED);
    assert_string_equal(d.detail, "LOGIN: m1 NO [AUTHENTICATIONFAILED] Authentication failed.");
    /* The connection closing during the goodbye does not change the verdict. */
    assert_int_equal(monitor_dialog_closed(&d), MONITOR_RESULT_REJECTED);

    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    step(&d, "m1 BAD syntax", MONITOR_DIALOG_READ, "m2 LOGOUT\r\n");
    verdict(&d, MONITOR_RESULT_PROTOCOL_ERROR);

    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    step(&d, "+ go ahead", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_PROTOCOL_ERROR);

    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    step(&d, "m1OK", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_PROTOCOL_ERROR);

    /* The server going away after LOGIN was sent. */
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    assert_int_equal(monitor_dialog_closed(&d), MONITOR_RESULT_CLOSED);

    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    assert_int_equal(monitor_dialog_timed_out(&d), MONITOR_RESULT_TIMEOUT);
}

static void test_imap_greetings(void **state)
{
    (void)state;
    struct monitor_dialog d;
    const char *bad[] = {"* BYE too busy", "* NO", "* OKAY", "hello", "", "*OK", NULL};
    for (size_t i = 0; bad[i] != NULL; i++) {
        monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
        step(&d, bad[i], MONITOR_DIALOG_FINISH, "");
        verdict(&d, MONITOR_RESULT_BAD_GREETING);
    }
    /* A bare "* OK" and PREAUTH are fine. */
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* ok", MONITOR_DIALOG_READ, "m1 LOGIN \"probe\" \"x\"\r\n");
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, "probe", "x");
    step(&d, "* PREAUTH welcome", MONITOR_DIALOG_READ, "m2 LOGOUT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
    /* Bytes that are not text end up as '?' in the detail. */
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, NULL, NULL);
    struct buf out = {0};
    assert_int_equal(monitor_dialog_line(&d, "\x01\xff\0z", 4, &out), MONITOR_DIALOG_FINISH);
    assert_string_equal(d.detail, "greeting: ???z");
    buf_free(&out);
}

/* No credentials for the tag: greeting only, then LOGOUT. */
static void test_imap_connect_only(void **state)
{
    (void)state;
    struct monitor_dialog d;
    monitor_dialog_init(&d, MONITOR_PROTO_IMAP, NULL, NULL);
    step(&d, "* OK ready", MONITOR_DIALOG_READ, "m2 LOGOUT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
    assert_int_equal(monitor_dialog_timed_out(&d), MONITOR_RESULT_OK);
}

static void test_pop3(void **state)
{
    (void)state;
    struct monitor_dialog d;
    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "s e c");
    step(&d, "+OK POP3 ready", MONITOR_DIALOG_READ, "USER probe\r\n");
    step(&d, "+OK", MONITOR_DIALOG_READ, "PASS s e c\r\n");
    assert_false(d.decided);
    step(&d, "+OK logged in", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
    step(&d, "+OK bye", MONITOR_DIALOG_FINISH, "");

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "x");
    step(&d, "+OK POP3 ready", MONITOR_DIALOG_READ, "USER probe\r\n");
    step(&d, "+OK", MONITOR_DIALOG_READ, "PASS x\r\n");
    step(&d, "-ERR [AUTH] Authentication failed", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_REJECTED);
    assert_string_equal(d.detail, "PASS: -ERR [AUTH] Authentication failed");

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "x");
    step(&d, "+OK POP3 ready", MONITOR_DIALOG_READ, "USER probe\r\n");
    step(&d, "-ERR no", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_REJECTED);

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "x");
    step(&d, "+OK POP3 ready", MONITOR_DIALOG_READ, "USER probe\r\n");
    step(&d, "what?", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_PROTOCOL_ERROR);

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "x");
    step(&d, "-ERR busy", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_BAD_GREETING);

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, "probe", "x");
    step(&d, "+OKAY", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_BAD_GREETING);

    monitor_dialog_init(&d, MONITOR_PROTO_POP3, NULL, NULL);
    step(&d, "+OK ready", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
}

static void test_lmtp(void **state)
{
    (void)state;
    struct monitor_dialog d;
    /* Credentials are ignored: LMTP has no login. */
    monitor_dialog_init(&d, MONITOR_PROTO_LMTP, "probe", "x");
    step(&d, "220-first", MONITOR_DIALOG_READ, "");
    step(&d, "220 host LMTP ready", MONITOR_DIALOG_READ, "LHLO petrel-monitor\r\n");
    step(&d, "250-host", MONITOR_DIALOG_READ, "");
    step(&d, "250-PIPELINING", MONITOR_DIALOG_READ, "");
    assert_false(d.decided);
    step(&d, "250 8BITMIME", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_OK);
    step(&d, "221 bye", MONITOR_DIALOG_FINISH, "");

    monitor_dialog_init(&d, MONITOR_PROTO_LMTP, NULL, NULL);
    step(&d, "220", MONITOR_DIALOG_READ, "LHLO petrel-monitor\r\n");
    step(&d, "250", MONITOR_DIALOG_READ, "QUIT\r\n");
    step(&d, "221-a", MONITOR_DIALOG_READ, "");
    step(&d, "221 b", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_OK);

    const char *bad_greetings[] = {"421 shutting down", "554 no", "22", "220x", "abc", NULL};
    for (size_t i = 0; bad_greetings[i] != NULL; i++) {
        monitor_dialog_init(&d, MONITOR_PROTO_LMTP, NULL, NULL);
        step(&d, bad_greetings[i], MONITOR_DIALOG_FINISH, "");
        verdict(&d, MONITOR_RESULT_BAD_GREETING);
    }

    monitor_dialog_init(&d, MONITOR_PROTO_LMTP, NULL, NULL);
    step(&d, "220 ok", MONITOR_DIALOG_READ, "LHLO petrel-monitor\r\n");
    step(&d, "500 unknown command", MONITOR_DIALOG_READ, "QUIT\r\n");
    verdict(&d, MONITOR_RESULT_REJECTED);

    monitor_dialog_init(&d, MONITOR_PROTO_LMTP, NULL, NULL);
    step(&d, "220 ok", MONITOR_DIALOG_READ, "LHLO petrel-monitor\r\n");
    step(&d, "hello", MONITOR_DIALOG_FINISH, "");
    verdict(&d, MONITOR_RESULT_PROTOCOL_ERROR);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(monitor_protocol_name(MONITOR_PROTO_IMAP), "imap");
    assert_string_equal(monitor_protocol_name(MONITOR_PROTO_POP3), "pop3");
    assert_string_equal(monitor_protocol_name(MONITOR_PROTO_LMTP), "lmtp");
    const char *names[] = {"ok",           "connect_error", "timeout",        "tls_error",
                           "bad_greeting", "rejected",      "protocol_error", "closed"};
    for (int i = 0; i < MONITOR_RESULT_COUNT; i++)
        assert_string_equal(monitor_result_name((enum monitor_result)i), names[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imap_login),     cmocka_unit_test(test_imap_login_failures),
        cmocka_unit_test(test_imap_greetings), cmocka_unit_test(test_imap_connect_only),
        cmocka_unit_test(test_pop3),           cmocka_unit_test(test_lmtp),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
