/* Unit tests for protocols/common/mail-forward.h: the IMAP ID fields and
 * XCLIENT attributes a login proxy forwards. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "protocols/common/mail-forward.h"

#include <string.h>

static bool xclient(struct mail_forward *f, const char *args, const char **why)
{
    mail_forward_init(f);
    *why = NULL;
    return mail_forward_xclient(f, MAIL_FORWARD_XTEXT, args, strlen(args), why);
}

static void test_id_fields(void **state)
{
    (void)state;
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    assert_true(mail_forward_id_field(&f, "X-Originating-IP", "192.0.2.7", &why));
    assert_true(mail_forward_id_field(&f, "x-originating-port", "40123", &why));
    assert_true(mail_forward_id_field(&f, "x-session-id", "AbC+/9=_-", &why));
    assert_true(mail_forward_id_field(&f, "x-proxy-ttl", "4", &why));
    assert_true(mail_forward_id_field(&f, "name", "Thunderbird", &why));    /* not ours: ignored */
    assert_true(mail_forward_id_field(&f, "x-originating-ip", NULL, &why)); /* NIL */
    assert_string_equal(f.ip, "192.0.2.7");
    assert_int_equal(f.port, 40123);
    assert_string_equal(f.session, "AbC+/9=_-");
    assert_false(mail_forward_id_field(&f, "x-session-id", "a:1", &why)); /* no atom */
    assert_int_equal(f.ttl, 4);
    char peer[80];
    mail_forward_format_peer(&f, peer, sizeof(peer));
    assert_string_equal(peer, "192.0.2.7:40123");
}

static void test_id_canonical_v6(void **state)
{
    (void)state;
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    assert_true(mail_forward_id_field(&f, "x-originating-ip", "2001:DB8:0:0::1", &why));
    assert_string_equal(f.ip, "2001:db8::1");
    char peer[80];
    mail_forward_format_peer(&f, peer, sizeof(peer));
    assert_string_equal(peer, "2001:db8::1");
    assert_true(mail_forward_id_field(&f, "x-originating-port", "1", &why));
    mail_forward_format_peer(&f, peer, sizeof(peer));
    assert_string_equal(peer, "[2001:db8::1]:1");
}

static void test_id_bad_values(void **state)
{
    (void)state;
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    assert_false(mail_forward_id_field(&f, "x-originating-ip", "example.com", &why));
    assert_string_equal(why, "bad address");
    assert_false(mail_forward_id_field(&f, "x-originating-ip", "192.0.2.7\r\n", &why));
    assert_false(mail_forward_id_field(&f, "x-originating-ip", "", &why));
    assert_false(mail_forward_id_field(&f, "x-originating-port", "0", &why));
    assert_false(mail_forward_id_field(&f, "x-originating-port", "65536", &why));
    assert_false(mail_forward_id_field(&f, "x-originating-port", "+80", &why));
    assert_false(mail_forward_id_field(&f, "x-originating-port", "", &why));
    /* at most 6 digits, leading zeros included */
    assert_false(mail_forward_id_field(&f, "x-originating-port", "0000143", &why));
    assert_false(mail_forward_id_field(&f, "x-proxy-ttl", "0000004", &why));
    assert_false(mail_forward_id_field(&f, "x-session-id", "a b", &why));
    assert_false(mail_forward_id_field(&f, "x-session-id", "id\"x", &why));
    char long_id[MAIL_FORWARD_SESSION_MAX + 2];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    assert_false(mail_forward_id_field(&f, "x-session-id", long_id, &why));
    long_id[MAIL_FORWARD_SESSION_MAX] = '\0';
    assert_true(mail_forward_id_field(&f, "x-session-id", long_id, &why));
    assert_false(mail_forward_id_field(&f, "x-proxy-ttl", "101", &why));
    assert_false(mail_forward_id_field(&f, "x-proxy-ttl", "-1", &why));
    /* Nothing bad was taken. */
    assert_string_equal(f.ip, "");
    assert_int_equal(f.port, 0);
    assert_int_equal(f.ttl, -1);
}

static void test_xclient(void **state)
{
    (void)state;
    struct mail_forward f;
    const char *why;
    assert_true(xclient(&f, "ADDR=192.0.2.9 PORT=1234 SESSION=s1 TTL=3", &why));
    assert_string_equal(f.ip, "192.0.2.9");
    assert_int_equal(f.port, 1234);
    assert_string_equal(f.session, "s1");
    assert_int_equal(f.ttl, 3);
    /* Case-insensitive names, extra spaces, unknown attributes ignored. */
    assert_true(xclient(&f, "  addr=192.0.2.10   helo=mx.example  PROTO=ESMTP ", &why));
    assert_string_equal(f.ip, "192.0.2.10");
    /* Postfix's IPv6 prefix and placeholders. */
    assert_true(xclient(&f, "ADDR=IPV6:2001:db8::5 PORT=[UNAVAILABLE]", &why));
    assert_string_equal(f.ip, "2001:db8::5");
    assert_int_equal(f.port, 0);
    assert_true(xclient(&f, "ADDR=[TEMPUNAVAIL]", &why));
    assert_string_equal(f.ip, "");
    /* xtext: +HH stands for a byte. */
    assert_true(xclient(&f, "SESSION=a+2Bb", &why));
    assert_string_equal(f.session, "a+b");
}

static void test_xclient_raw(void **state)
{
    (void)state;
    struct mail_forward f;
    const char *why = NULL;
    const char *dovecot = "ADDR=192.0.2.3 PORT=110 SESSION=WVhMAT5hB+N/AAAC TTL=4 "
                          "CLIENT-TRANSPORT=insecure";
    mail_forward_init(&f);
    assert_true(mail_forward_xclient(&f, MAIL_FORWARD_RAW, dovecot, strlen(dovecot), &why));
    assert_string_equal(f.session, "WVhMAT5hB+N/AAAC");
    assert_string_equal(f.ip, "192.0.2.3");
    /* The same line read as xtext is malformed ("+N/" is no hex pair). */
    mail_forward_init(&f);
    assert_false(mail_forward_xclient(&f, MAIL_FORWARD_XTEXT, dovecot, strlen(dovecot), &why));
    const char *ctl = "SESSION=a\x01b";
    mail_forward_init(&f);
    assert_false(mail_forward_xclient(&f, MAIL_FORWARD_RAW, ctl, strlen(ctl), &why));
    assert_string_equal(why, "bad value");
}

static void test_xclient_bad(void **state)
{
    (void)state;
    struct mail_forward f;
    const char *why;
    assert_false(xclient(&f, "", &why));
    assert_string_equal(why, "no attributes");
    assert_false(xclient(&f, "ADDR", &why));
    assert_false(xclient(&f, "=1.2.3.4", &why));
    assert_false(xclient(&f, "ADDR=1.2.3.4.5", &why));
    assert_string_equal(why, "bad address");
    assert_false(xclient(&f, "SESSION=a+2", &why)); /* truncated hex */
    assert_string_equal(why, "bad xtext");
    assert_false(xclient(&f, "SESSION=a+2b", &why));  /* lower-case hex */
    assert_false(xclient(&f, "SESSION=a=b", &why));   /* '=' must be encoded */
    assert_false(xclient(&f, "SESSION=a+20b", &why)); /* decodes to a space */
    assert_string_equal(why, "bad session id");
    assert_false(xclient(&f, "PORT=99999", &why));
    assert_false(xclient(&f, "TTL=x", &why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_fields),     cmocka_unit_test(test_id_canonical_v6),
        cmocka_unit_test(test_id_bad_values), cmocka_unit_test(test_xclient),
        cmocka_unit_test(test_xclient_raw),   cmocka_unit_test(test_xclient_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
