/* Unit tests for clients/auth/auth-sasl.h: PLAIN with and without an
 * initial response, authorization identities, LOGIN's two steps, and
 * malformed responses. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/base64.h"
#include "clients/auth/auth-sasl.h"

#include <stdlib.h>
#include <string.h>

static char *b64(const void *data, size_t len)
{
    struct buf out = {0};
    base64_encode_append(&out, data, len);
    buf_append_char(&out, '\0');
    return buf_steal(&out);
}

static void test_mech_names(void **state)
{
    (void)state;
    assert_int_equal(sasl_mech_parse("plain"), SASL_MECH_PLAIN);
    assert_int_equal(sasl_mech_parse("LOGIN"), SASL_MECH_LOGIN);
    assert_int_equal(sasl_mech_parse("CRAM-MD5"), SASL_MECH_UNKNOWN);
    assert_string_equal(sasl_mech_name(SASL_MECH_PLAIN), "PLAIN");
}

static void test_plain_initial_response(void **state)
{
    (void)state;
    static const char raw[] = "\0alice\0s3cret pass";
    char *resp = b64(raw, sizeof(raw) - 1);
    struct sasl_exchange x;
    struct buf ch = {0};
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, resp, &ch), SASL_STEP_DONE);
    assert_string_equal(x.username, "alice");
    assert_string_equal(x.password, "s3cret pass");
    assert_int_equal(ch.len, 0);
    sasl_exchange_free(&x);
    free(resp);
}

static void test_plain_without_initial_response(void **state)
{
    (void)state;
    static const char raw[] = "bob\0bob\0pw";
    char *resp = b64(raw, sizeof(raw) - 1);
    struct sasl_exchange x;
    struct buf ch = {0};
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, NULL, &ch), SASL_STEP_CHALLENGE);
    assert_int_equal(ch.len, 0); /* the empty challenge */
    assert_int_equal(sasl_exchange_step(&x, resp, &ch), SASL_STEP_DONE);
    assert_string_equal(x.username, "bob");
    sasl_exchange_free(&x);
    free(resp);
    buf_free(&ch);
}

static void expect_plain_failure(const void *raw, size_t len, const char *why)
{
    char *resp = b64(raw, len);
    struct sasl_exchange x;
    struct buf ch = {0};
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, resp, &ch), SASL_STEP_FAILED);
    assert_non_null(strstr(x.error, why));
    assert_null(x.username);
    sasl_exchange_free(&x);
    free(resp);
}

static void test_plain_malformed(void **state)
{
    (void)state;
    expect_plain_failure("alice", 5, "malformed");
    expect_plain_failure("\0alice", 6, "malformed");
    expect_plain_failure("\0alice\0pw\0extra", 15, "malformed");
    expect_plain_failure("\0\0pw", 4, "empty username");
    expect_plain_failure("mallory\0alice\0pw", 16, "authorization identity");
    struct sasl_exchange x;
    struct buf ch = {0};
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, "!!notbase64", &ch), SASL_STEP_FAILED);
    assert_non_null(strstr(x.error, "base64"));
    assert_true(sasl_response_syntax_error(&x));
    sasl_exchange_free(&x);
    /* RFC 4959's empty initial response decodes: no syntax error, a
     * failed login. */
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, "", &ch), SASL_STEP_FAILED);
    assert_false(sasl_response_syntax_error(&x));
    sasl_exchange_free(&x);
    /* An oversized response is refused before decoding. */
    char big[SASL_MAX_RESPONSE * 2];
    memset(big, 'A', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sasl_exchange_init(&x, SASL_MECH_PLAIN);
    assert_int_equal(sasl_exchange_step(&x, big, &ch), SASL_STEP_FAILED);
    assert_true(sasl_response_syntax_error(&x));
    sasl_exchange_free(&x);
}

static void test_login_steps(void **state)
{
    (void)state;
    struct sasl_exchange x;
    struct buf ch = {0};
    sasl_exchange_init(&x, SASL_MECH_LOGIN);
    assert_int_equal(sasl_exchange_step(&x, NULL, &ch), SASL_STEP_CHALLENGE);
    buf_append_char(&ch, '\0');
    assert_string_equal(ch.data, "VXNlcm5hbWU6"); /* "Username:" */
    buf_reset(&ch);
    char *user = b64("carol", 5);
    assert_int_equal(sasl_exchange_step(&x, user, &ch), SASL_STEP_CHALLENGE);
    buf_append_char(&ch, '\0');
    assert_string_equal(ch.data, "UGFzc3dvcmQ6"); /* "Password:" */
    char *pw = b64("pa:ss", 5);
    assert_int_equal(sasl_exchange_step(&x, pw, &ch), SASL_STEP_DONE);
    assert_string_equal(x.username, "carol");
    assert_string_equal(x.password, "pa:ss");
    /* Nothing more is expected. */
    assert_int_equal(sasl_exchange_step(&x, pw, &ch), SASL_STEP_FAILED);
    sasl_exchange_free(&x);
    free(user);
    free(pw);
    buf_free(&ch);
}

static void test_login_initial_response_is_the_username(void **state)
{
    (void)state;
    struct sasl_exchange x;
    struct buf ch = {0};
    char *user = b64("dave", 4);
    sasl_exchange_init(&x, SASL_MECH_LOGIN);
    assert_int_equal(sasl_exchange_step(&x, user, &ch), SASL_STEP_CHALLENGE);
    char *pw = b64("", 0);
    assert_int_equal(sasl_exchange_step(&x, pw, &ch), SASL_STEP_DONE);
    assert_string_equal(x.password, "");
    sasl_exchange_free(&x);
    /* A NUL inside a LOGIN response is refused. */
    sasl_exchange_init(&x, SASL_MECH_LOGIN);
    char *nul = b64("a\0b", 3);
    assert_int_equal(sasl_exchange_step(&x, nul, &ch), SASL_STEP_FAILED);
    sasl_exchange_free(&x);
    /* So is an empty username. */
    sasl_exchange_init(&x, SASL_MECH_LOGIN);
    assert_int_equal(sasl_exchange_step(&x, pw, &ch), SASL_STEP_FAILED);
    sasl_exchange_free(&x);
    free(user);
    free(pw);
    free(nul);
    buf_free(&ch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mech_names),
        cmocka_unit_test(test_plain_initial_response),
        cmocka_unit_test(test_plain_without_initial_response),
        cmocka_unit_test(test_plain_malformed),
        cmocka_unit_test(test_login_steps),
        cmocka_unit_test(test_login_initial_response_is_the_username),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
