/* Unit tests for the pure parts of the login proxy's shared code
 * (protocols/common/mail-proxy.h, login-metrics.h): the ring session id of
 * a connection, the client's port from its peer text, the userdb's
 * director tag, and the metric families with every series at 0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clients/auth/userdb.h"
#include "core/buf.h"
#include "core/metrics.h"
#include "protocols/common/login-metrics.h"
#include "protocols/common/mail-proxy.h"

#include <stdlib.h>
#include <string.h>

static void test_session_id(void **state)
{
    (void)state;
    char sid[40];
    assert_true(mail_proxy_session_id('i', "1f2e", sid, sizeof(sid)));
    assert_string_equal(sid, "i1f2e");
    /* a forwarded id with characters the ring refuses: no SESSION-START */
    assert_false(mail_proxy_session_id('p', "a b", sid, sizeof(sid)));
    assert_false(mail_proxy_session_id('p', "x/y", sid, sizeof(sid)));
    /* too long for the buffer, or for the ring (32) */
    assert_false(mail_proxy_session_id('i', "0123456789abcdef", sid, 8));
    assert_false(mail_proxy_session_id('i', "0123456789abcdef0123456789abcdef", sid, sizeof(sid)));
}

static void test_peer_port(void **state)
{
    (void)state;
    assert_int_equal(mail_proxy_peer_port("192.0.2.7:40123"), 40123);
    assert_int_equal(mail_proxy_peer_port("[2001:db8::1]:993"), 993);
    assert_int_equal(mail_proxy_peer_port("2001:db8::1"), 0); /* no port */
    assert_int_equal(mail_proxy_peer_port("unix"), 0);
    assert_int_equal(mail_proxy_peer_port("192.0.2.7:"), 0);
    assert_int_equal(mail_proxy_peer_port("192.0.2.7:70000"), 0);
    assert_int_equal(mail_proxy_peer_port("192.0.2.7:12x"), 0);
}

static void test_director_tag(void **state)
{
    (void)state;
    struct userdb_entry *u = userdb_entry_new("alice");
    char *error = NULL;
    assert_string_equal(mail_proxy_director_tag(u), "");
    assert_string_equal(mail_proxy_director_tag(NULL), "");
    assert_true(userdb_entry_set(u, "director_tag", "blue", &error));
    assert_string_equal(mail_proxy_director_tag(u), "blue");
    userdb_entry_free(u);
}

static void test_metrics_exist_at_zero(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct login_metrics imap, pop3, again;
    login_metrics_register(reg, "imap", &imap);
    login_metrics_register(reg, "pop3", &pop3);
    login_metrics_register(reg, "imap", &again); /* a second front shares the families */
    assert_ptr_equal(imap.sessions, again.sessions);
    login_metrics_result(&imap, LOGIN_RESULT_BACKEND_REJECTED);
    login_metrics_retry(&pop3, LOGIN_STAGE_AUTH_DIAL);
    login_metrics_sessions_add(&imap, 1);
    struct buf out = {0};
    metrics_render(reg, &out);
    buf_append_char(&out, '\0');
    const char *text = out.data;
    static const char *const expect[] = {
        "petrel_login_result_total{protocol=\"imap\",result=\"ok\"} 0",
        "petrel_login_result_total{protocol=\"imap\",result=\"backend_rejected\"} 1",
        "petrel_login_result_total{protocol=\"pop3\",result=\"tls_error\"} 0",
        "petrel_login_result_total{protocol=\"pop3\",result=\"preamble_error\"} 0",
        "petrel_login_transient_retries_total{protocol=\"pop3\",stage=\"auth_dial\"} 1",
        "petrel_login_transient_exhausted_total{protocol=\"imap\",stage=\"backend_session\"} 0",
        "petrel_login_sessions{protocol=\"imap\"} 1",
        "petrel_login_phase_seconds_count{protocol=\"imap\",phase=\"backend_preamble\"} 0",
        "petrel_login_phase_seconds_count{protocol=\"pop3\",phase=\"warden_connect\"} 0",
        NULL,
    };
    for (size_t i = 0; expect[i] != NULL; i++) {
        if (strstr(text, expect[i]) == NULL)
            fail_msg("missing: %s", expect[i]);
    }
    assert_string_equal(login_phase_name(LOGIN_PHASE_AUTH_DIAL), "auth_dial");
    assert_string_equal(login_result_name(LOGIN_RESULT_UNAVAILABLE), "unavailable");
    assert_string_equal(login_stage_name(LOGIN_STAGE_BACKEND_SESSION), "backend_session");
    buf_free(&out);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_id),
        cmocka_unit_test(test_peer_port),
        cmocka_unit_test(test_director_tag),
        cmocka_unit_test(test_metrics_exist_at_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
