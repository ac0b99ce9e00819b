/* Unit tests for quota-status's protocol reader (policy-request.h) and its
 * recipient mapping (policy-recipient.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/quota-status/policy-recipient.h"
#include "services/quota-status/policy-request.h"

#include <stdlib.h>
#include <string.h>

static enum policy_line feed(struct policy_request *r, const char *line, struct petrel_error *err)
{
    return policy_request_line(r, line, strlen(line), 65536, err);
}

static void test_request(void **state)
{
    (void)state;
    struct policy_request r;
    policy_request_init(&r);
    struct petrel_error err = {0};
    const char *lines[] = {"request=smtpd_access_policy",
                           "protocol_state=RCPT",
                           "protocol_name=ESMTP",
                           "client_address=192.0.2.1",
                           "sender=s@example.net",
                           "recipient=alice+x@example.org",
                           "size=12345",
                           "ccert_subject=",
                           NULL};
    for (size_t i = 0; lines[i] != NULL; i++)
        assert_int_equal(feed(&r, lines[i], &err), POLICY_MORE);
    assert_int_equal(feed(&r, "", &err), POLICY_DONE);
    assert_string_equal(r.request, "smtpd_access_policy");
    assert_string_equal(r.protocol_state, "RCPT");
    assert_string_equal(r.recipient, "alice+x@example.org");
    assert_int_equal(r.size, 12345);
    policy_request_reset(&r);
    assert_null(r.recipient);
    /* CRLF tolerated; an empty recipient is none; a bad size is unknown. */
    assert_int_equal(feed(&r, "recipient=\r", &err), POLICY_MORE);
    assert_int_equal(feed(&r, "size=12x", &err), POLICY_MORE);
    assert_int_equal(feed(&r, "\r", &err), POLICY_DONE);
    assert_null(r.recipient);
    assert_int_equal(r.size, 0);
    policy_request_reset(&r);
    assert_int_equal(feed(&r, "size=18446744073709551616", &err), POLICY_MORE);
    assert_int_equal(r.size, 0);
    assert_int_equal(feed(&r, "size=18446744073709551615", &err), POLICY_MORE);
    assert_int_equal(r.size, UINT64_MAX);
    policy_request_reset(&r);
    /* errors */
    assert_int_equal(feed(&r, "no equals sign", &err), POLICY_ERROR);
    assert_string_equal(err.message, "expected name=value");
    policy_request_reset(&r);
    assert_int_equal(feed(&r, "=value", &err), POLICY_ERROR);
    policy_request_reset(&r);
    char big[1100];
    memset(big, 'a', sizeof(big));
    memcpy(big, "recipient=", 10);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(feed(&r, big, &err), POLICY_ERROR);
    assert_string_equal(err.message, "recipient longer than 1024 bytes");
    policy_request_reset(&r);
    for (int i = 0; i < POLICY_MAX_ATTRS; i++)
        assert_int_equal(feed(&r, "x=y", &err), POLICY_MORE);
    assert_int_equal(feed(&r, "x=y", &err), POLICY_ERROR);
    assert_string_equal(err.message, "more than 256 attributes");
    policy_request_reset(&r);
    assert_int_equal(policy_request_line(&r, "sender=0123456789", 17, 15, &err), POLICY_ERROR);
    assert_string_equal(err.message, "request longer than 15 bytes");
    policy_request_reset(&r);
}

static void expect(const char *addr, const char *delims, const char *fmt, const char *lookup,
                   const char *detail)
{
    struct policy_recipient r;
    assert_true(policy_recipient_parse(addr, delims, fmt, &r));
    assert_string_equal(r.lookup, lookup);
    if (detail == NULL)
        assert_null(r.detail);
    else
        assert_string_equal(r.detail, detail);
    policy_recipient_free(&r);
}

static void test_recipient(void **state)
{
    (void)state;
    expect("alice@example.org", "+", "%u", "alice@example.org", NULL);
    expect("alice+lists@Example.ORG", "+", "%u", "alice@example.org", "lists");
    expect("alice+lists@example.org", "+", "%n", "alice", "lists");
    expect("alice-a+b@example.org", "+-", "%n", "alice", "a+b");
    expect("+x@example.org", "+", "%n", "+x", NULL);        /* the first character never splits */
    expect("alice+@example.org", "+", "%n", "alice", NULL); /* empty detail: none */
    expect("alice+x", "+", "%u", "alice", "x");             /* no domain */
    expect("alice+x@example.org", "", "%u", "alice+x@example.org", NULL);
    expect("a@b@example.org", "+", "%d/%n%%", "example.org/a@b%", NULL);
    struct policy_recipient r;
    assert_false(policy_recipient_parse("@example.org", "+", "%u", &r));
    assert_false(policy_recipient_parse("", "+", "%u", &r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_recipient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
