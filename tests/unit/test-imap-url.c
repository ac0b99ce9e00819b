/* Unit tests for protocols/imap/imap-url.h: the numbers of a CATENATE URL
 * (UID, UIDVALIDITY, PARTIAL) are 1 to 20 digits within 32 bits; leading
 * zeros count toward the 20. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "protocols/imap/imap-url.h"

#include <string.h>

static bool parse(const char *text, struct imap_url *u)
{
    memset(u, 0, sizeof(*u));
    return imap_url_parse(text, strlen(text), u);
}

static void test_uid_digits(void **state)
{
    (void)state;
    struct imap_url u;
    assert_true(parse("/INBOX/;UID=7", &u));
    assert_int_equal(u.uid, 7);
    /* 20 digits with leading zeros: still 7 */
    assert_true(parse("/INBOX/;UID=00000000000000000007", &u));
    assert_int_equal(u.uid, 7);
    /* 21 digits: over the cap, whatever the value */
    assert_false(parse("/INBOX/;UID=000000000000000000007", &u));
    assert_true(parse("/INBOX/;UID=4294967295", &u));
    assert_false(parse("/INBOX/;UID=4294967296", &u));
    assert_false(parse("/INBOX/;UID=", &u));
    assert_false(parse("/INBOX/;UID=0", &u));
    assert_false(parse("/INBOX/;UID=+7", &u));
}

static void test_partial_digits(void **state)
{
    (void)state;
    struct imap_url u;
    assert_true(parse("/INBOX/;UID=1/;PARTIAL=00000000000000000010.00000000000000000005", &u));
    assert_true(u.partial);
    assert_int_equal(u.partial_start, 10);
    assert_int_equal(u.partial_len, 5);
    assert_false(parse("/INBOX/;UID=1/;PARTIAL=000000000000000000010", &u));
    assert_false(parse("/INBOX/;UID=1/;PARTIAL=10.000000000000000000005", &u));
    assert_false(parse("/INBOX/;UID=1/;PARTIAL=4294967296", &u));
    assert_false(parse("/INBOX/;UID=1/;PARTIAL=", &u));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uid_digits),
        cmocka_unit_test(test_partial_digits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
