/* Unit tests for the login proxy's backend dialogues (imap-proxy-login.h,
 * pop3-proxy-login.h): what is sent for a client, and how each backend
 * answer is read (Petrel's and Dovecot's greetings and replies). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "protocols/imap/imap-proxy-login.h"
#include "protocols/pop3/pop3-proxy-login.h"

#include <string.h>

static struct mail_proxy_login_params params(bool with_client)
{
    struct mail_proxy_login_params p = {.user = "alice", .password = "won der\"land"};
    mail_forward_init(&p.client);
    if (with_client) {
        strcpy(p.client.ip, "192.0.2.7");
        p.client.port = 40123;
        strcpy(p.client.session, "Sess+1/x=");
        p.client.ttl = 4;
    }
    return p;
}

/* base64("\0alice\0won der\"land") */
#define PLAIN "AGFsaWNlAHdvbiBkZXIibGFuZA=="

static enum mail_proxy_login_step imap(struct imap_proxy_login *pl, const char *line,
                                       struct buf *out, const char **text)
{
    struct mail_proxy_login_result r;
    imap_proxy_login_line(pl, line, strlen(line), out, &r);
    if (text != NULL)
        *text = r.text;
    return r.step;
}

static void test_imap_login_with_the_client_address(void **state)
{
    (void)state;
    struct mail_proxy_login_params p = params(true);
    struct imap_proxy_login *pl = imap_proxy_login_new(&p);
    struct buf out = {0};
    const char *text;
    assert_int_equal(imap(pl, "* OK [CAPABILITY IMAP4rev1 ID SASL-IR] Petrel ready.", &out, NULL),
                     MAIL_PROXY_LOGIN_CONTINUE);
    assert_string_equal(buf_cstr(&out),
                        "P1 ID (\"x-originating-ip\" \"192.0.2.7\" \"x-originating-port\" "
                        "\"40123\" \"x-session-id\" \"Sess+1/x=\" \"x-proxy-ttl\" \"4\")\r\n"
                        "P2 AUTHENTICATE PLAIN " PLAIN "\r\n");
    buf_reset(&out);
    assert_int_equal(imap(pl, "* ID (\"name\" \"Petrel\")", &out, NULL), MAIL_PROXY_LOGIN_CONTINUE);
    assert_int_equal(imap(pl, "P1 OK ID completed.", &out, NULL), MAIL_PROXY_LOGIN_CONTINUE);
    assert_int_equal(imap(pl, "* CAPABILITY IMAP4rev1", &out, NULL), MAIL_PROXY_LOGIN_CONTINUE);
    assert_int_equal(imap(pl, "P2 OK [CAPABILITY IMAP4rev1 IDLE] Logged in", &out, &text),
                     MAIL_PROXY_LOGIN_OK);
    assert_string_equal(text, "[CAPABILITY IMAP4rev1 IDLE] Logged in");
    assert_int_equal(out.len, 0);
    assert_int_equal(imap(pl, "* 1 EXISTS", &out, NULL), MAIL_PROXY_LOGIN_PROTOCOL);
    imap_proxy_login_free(pl);
    buf_free(&out);
}

static void test_imap_answers(void **state)
{
    (void)state;
    struct mail_proxy_login_params p = params(false);
    struct {
        const char *greeting, *answer;
        enum mail_proxy_login_step step;
        const char *text;
    } cases[] = {
        {"* OK ready", "P2 NO [AUTHENTICATIONFAILED] Authentication failed.",
         MAIL_PROXY_LOGIN_REJECTED, "[AUTHENTICATIONFAILED] Authentication failed."},
        {"* OK ready", "P2 NO [UNAVAILABLE] Try later.", MAIL_PROXY_LOGIN_TEMPFAIL,
         "[UNAVAILABLE] Try later."},
        {"* OK ready", "P2 NO [SERVERBUG] Oops.", MAIL_PROXY_LOGIN_TEMPFAIL, "[SERVERBUG] Oops."},
        {"* OK ready", "P2 BAD what?", MAIL_PROXY_LOGIN_PROTOCOL, NULL},
        {"* OK ready", "+ ", MAIL_PROXY_LOGIN_PROTOCOL, NULL},
        {"* OK ready", "P3 OK", MAIL_PROXY_LOGIN_PROTOCOL, NULL},
        {"* OK ready", "P2 OK", MAIL_PROXY_LOGIN_OK, ""},
        {"* BYE Too many connections", NULL, MAIL_PROXY_LOGIN_TEMPFAIL, "Too many connections"},
        {"* PREAUTH hi", NULL, MAIL_PROXY_LOGIN_PROTOCOL, NULL},
        {"+OK POP3", NULL, MAIL_PROXY_LOGIN_PROTOCOL, NULL},
        {"* OKAY", NULL, MAIL_PROXY_LOGIN_PROTOCOL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct imap_proxy_login *pl = imap_proxy_login_new(&p);
        struct buf out = {0};
        const char *text = NULL;
        enum mail_proxy_login_step step = imap(pl, cases[i].greeting, &out, &text);
        if (cases[i].answer != NULL) {
            assert_int_equal(step, MAIL_PROXY_LOGIN_CONTINUE);
            /* Without a client address the ID says NIL. */
            assert_non_null(strstr(buf_cstr(&out), "P1 ID NIL\r\n"));
            step = imap(pl, cases[i].answer, &out, &text);
        }
        assert_int_equal(step, cases[i].step);
        if (cases[i].text != NULL)
            assert_string_equal(text, cases[i].text);
        imap_proxy_login_free(pl);
        buf_free(&out);
    }
}

static void test_imap_hostile_lines(void **state)
{
    (void)state;
    struct mail_proxy_login_params p = params(true);
    struct imap_proxy_login *pl = imap_proxy_login_new(&p);
    struct buf out = {0};
    struct mail_proxy_login_result r;
    imap_proxy_login_line(pl, "* OK\0x", 6, &out, &r);
    assert_int_equal(r.step, MAIL_PROXY_LOGIN_PROTOCOL);
    imap_proxy_login_free(pl);
    pl = imap_proxy_login_new(&p);
    static char big[9000];
    memset(big, 'a', sizeof(big));
    memcpy(big, "* OK ", 5);
    imap_proxy_login_line(pl, big, sizeof(big), &out, &r);
    assert_int_equal(r.step, MAIL_PROXY_LOGIN_PROTOCOL);
    assert_int_equal(out.len, 0); /* nothing sent to such a backend */
    imap_proxy_login_free(pl);
    buf_free(&out);
}

static enum mail_proxy_login_step pop3(struct pop3_proxy_login *pl, const char *line,
                                       struct buf *out, const char **text)
{
    struct mail_proxy_login_result r;
    pop3_proxy_login_line(pl, line, strlen(line), out, &r);
    if (text != NULL)
        *text = r.text;
    return r.step;
}

static void test_pop3_xclient_when_offered(void **state)
{
    (void)state;
    struct mail_proxy_login_params p = params(true);
    struct pop3_proxy_login *pl = pop3_proxy_login_new(&p);
    struct buf out = {0};
    const char *text;
    assert_int_equal(pop3(pl, "+OK [XCLIENT] Petrel POP3 ready.", &out, NULL),
                     MAIL_PROXY_LOGIN_CONTINUE);
    assert_string_equal(buf_cstr(&out),
                        "XCLIENT ADDR=192.0.2.7 PORT=40123 SESSION=Sess+1/x= TTL=4\r\n"
                        "AUTH PLAIN " PLAIN "\r\n");
    assert_int_equal(pop3(pl, "+OK Updated.", &out, NULL), MAIL_PROXY_LOGIN_CONTINUE);
    assert_int_equal(pop3(pl, "+OK Logged in.", &out, &text), MAIL_PROXY_LOGIN_OK);
    assert_string_equal(text, "Logged in.");
    pop3_proxy_login_free(pl);
    /* Not offered: no XCLIENT (an untrusting backend would refuse it). */
    pl = pop3_proxy_login_new(&p);
    buf_reset(&out);
    assert_int_equal(pop3(pl, "+OK Dovecot ready.", &out, NULL), MAIL_PROXY_LOGIN_CONTINUE);
    assert_string_equal(buf_cstr(&out), "AUTH PLAIN " PLAIN "\r\n");
    assert_int_equal(pop3(pl, "-ERR [AUTH] Authentication failed.", &out, &text),
                     MAIL_PROXY_LOGIN_REJECTED);
    assert_string_equal(text, "[AUTH] Authentication failed.");
    pop3_proxy_login_free(pl);
    buf_free(&out);
}

static void test_pop3_answers(void **state)
{
    (void)state;
    struct mail_proxy_login_params p = params(true);
    struct {
        const char *lines[3];
        enum mail_proxy_login_step step;
    } cases[] = {
        {{"+OK [XCLIENT] hi", "-ERR not trusted", NULL}, MAIL_PROXY_LOGIN_PROTOCOL},
        {{"+OK [XCLIENT] hi", "+OK", "-ERR [SYS/TEMP] later"}, MAIL_PROXY_LOGIN_TEMPFAIL},
        {{"+OK [XCLIENT] hi", "+OK", "-ERR [IN-USE] busy"}, MAIL_PROXY_LOGIN_REJECTED},
        {{"+OK hi", "+ ", NULL}, MAIL_PROXY_LOGIN_PROTOCOL},
        {{"+OK hi", "* OK", NULL}, MAIL_PROXY_LOGIN_PROTOCOL},
        {{"-ERR [SYS/TEMP] overloaded", NULL, NULL}, MAIL_PROXY_LOGIN_TEMPFAIL},
        {{"* OK IMAP", NULL, NULL}, MAIL_PROXY_LOGIN_PROTOCOL},
        {{"+OKAY", NULL, NULL}, MAIL_PROXY_LOGIN_PROTOCOL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pop3_proxy_login *pl = pop3_proxy_login_new(&p);
        struct buf out = {0};
        enum mail_proxy_login_step step = MAIL_PROXY_LOGIN_CONTINUE;
        for (size_t j = 0; j < 3 && cases[i].lines[j] != NULL; j++)
            step = pop3(pl, cases[i].lines[j], &out, NULL);
        assert_int_equal(step, cases[i].step);
        pop3_proxy_login_free(pl);
        buf_free(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imap_login_with_the_client_address),
        cmocka_unit_test(test_imap_answers),
        cmocka_unit_test(test_imap_hostile_lines),
        cmocka_unit_test(test_pop3_xclient_when_offered),
        cmocka_unit_test(test_pop3_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
