/* Ring authentication (clients/ring/ring-auth.c) and its lines in the
 * codec: the HMAC-SHA256 proofs against vectors computed with Python's
 * hmac/hashlib (not with the code under test), the properties that stop
 * replay and reflection, the constant-time check refusing every near miss,
 * the nonces, the AUTH / AUTH-OK / VERSION auth= nonce= grammar, and how the
 * secret is read (file, <env>_FILE, env; trimmed; too short refused; the
 * director refuses to start without one unless allow_unauthenticated). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "services/director/director-config.h"
#include "clients/ring/ring-auth.h"
#include "clients/ring/ring-protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET "correct horse battery staple!"
#define SN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define CN "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
/* python3: hmac.new(SECRET, b"petrel-ring-auth\0" + role + b"\0" + SN + b"\0" + CN, sha256) */
#define CLIENT_PROOF "f49061ab1ca78be8deb02ffea5232778c14dbb08219463b3754419eb742e9904"
#define SERVER_PROOF "1c9b516a49ccdfa604ab9aa453f5d992c30a5c9a600bfa6d924613178ce5de60"

static void test_proofs_match_independent_vectors(void **state)
{
    (void)state;
    char out[RING_AUTH_HEX_LEN + 1];
    ring_auth_proof(SECRET, strlen(SECRET), RING_AUTH_CLIENT, SN, CN, out);
    assert_string_equal(out, CLIENT_PROOF);
    ring_auth_proof(SECRET, strlen(SECRET), RING_AUTH_SERVER, SN, CN, out);
    assert_string_equal(out, SERVER_PROOF);
}

static void test_check_refuses_every_near_miss(void **state)
{
    (void)state;
    size_t n = strlen(SECRET);
    assert_true(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN, CLIENT_PROOF));
    assert_true(ring_auth_check(SECRET, n, RING_AUTH_SERVER, SN, CN, SERVER_PROOF));
    /* reflection: one side's proof is never the other side's */
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_SERVER, SN, CN, CLIENT_PROOF));
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN, SERVER_PROOF));
    /* replay: the same proof for another challenge, or nonces swapped */
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, CN, SN, CLIENT_PROOF));
    char other[] = SN;
    other[63] = '0';
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, other, CN, CLIENT_PROOF));
    /* another secret, even one byte shorter */
    assert_false(ring_auth_check(SECRET, n - 1, RING_AUTH_CLIENT, SN, CN, CLIENT_PROOF));
    assert_false(ring_auth_check("correct horse battery staple?", n, RING_AUTH_CLIENT, SN, CN,
                                 CLIENT_PROOF));
    /* a proof off by one digit anywhere, upper case, short or long */
    for (size_t i = 0; i < RING_AUTH_HEX_LEN; i++) {
        char p[] = CLIENT_PROOF;
        p[i] = p[i] == '0' ? '1' : '0';
        assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN, p));
    }
    assert_false(
        ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN,
                        "F49061AB1CA78BE8DEB02FFEA5232778C14DBB08219463B3754419EB742E9904"));
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN, ""));
    assert_false(ring_auth_check(SECRET, n, RING_AUTH_CLIENT, SN, CN, CLIENT_PROOF "0"));
}

static void test_nonces_are_fresh_hex(void **state)
{
    (void)state;
    char a[RING_AUTH_HEX_LEN + 1], b[RING_AUTH_HEX_LEN + 1];
    assert_true(ring_auth_nonce(a));
    assert_true(ring_auth_nonce(b));
    assert_true(ring_auth_hex_valid(a));
    assert_true(ring_auth_hex_valid(b));
    assert_string_not_equal(a, b);
}

static bool parse(const char *text, struct ring_msg *m, char *copy, struct petrel_error *err)
{
    strcpy(copy, text);
    struct ring_line f;
    return ring_msg_parse(copy, strlen(copy), RING_LINE_MAX_DEFAULT, &f, m, err);
}

static void test_auth_lines_decode_and_roundtrip(void **state)
{
    (void)state;
    char copy[512];
    struct ring_msg m;
    struct petrel_error err;
    assert_true(parse("VERSION\tpetrel-ring\t1\t1\tauth=hmac-sha256\tnonce=" SN, &m, copy, &err));
    assert_string_equal(m.version.auth, "hmac-sha256");
    assert_string_equal(m.version.nonce, SN);
    struct buf out = {0};
    ring_msg_write(&out, &m);
    assert_string_equal(out.data, "VERSION\tpetrel-ring\t1\t1\tauth=hmac-sha256\tnonce=" SN "\n");
    buf_reset(&out);
    /* an old director's VERSION: no challenge */
    assert_true(parse("VERSION\tpetrel-ring\t1\t0", &m, copy, &err));
    assert_null(m.version.auth);
    assert_null(m.version.nonce);
    assert_true(parse("AUTH\thmac-sha256\t" CN "\t" CLIENT_PROOF, &m, copy, &err));
    assert_int_equal(m.type, RING_MSG_AUTH);
    assert_string_equal(m.auth.mech, "hmac-sha256");
    assert_string_equal(m.auth.nonce, CN);
    assert_string_equal(m.auth.proof, CLIENT_PROOF);
    ring_msg_write(&out, &m);
    assert_string_equal(out.data, "AUTH\thmac-sha256\t" CN "\t" CLIENT_PROOF "\n");
    buf_reset(&out);
    assert_true(parse("AUTH-OK\t" SERVER_PROOF, &m, copy, &err));
    assert_int_equal(m.type, RING_MSG_AUTH_OK);
    ring_msg_write(&out, &m);
    assert_string_equal(out.data, "AUTH-OK\t" SERVER_PROOF "\n");
    buf_free(&out);
    /* malformed: short, upper-case or non-hex nonces and proofs, missing fields */
    static const char *const bad[] = {
        "VERSION\tpetrel-ring\t1\t1\tnonce=abc",
        "VERSION\tpetrel-ring\t1\t1\tauth=",
        "AUTH\thmac-sha256\t" CN,
        "AUTH\t\t" CN "\t" CLIENT_PROOF,
        "AUTH\thmac-sha256\tzz" CN "\t" CLIENT_PROOF,
        "AUTH\thmac-sha256\t" CN
        "\tF49061AB1CA78BE8DEB02FFEA5232778C14DBB08219463B3754419EB742E9904",
        "AUTH\thmac-sha256\t" CN "\t" CLIENT_PROOF "00",
        "AUTH-OK",
        "AUTH-OK\tnot-a-proof",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], &m, copy, &err))
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(err.code, PETREL_ERR_INVALID);
    }
}

static char *write_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/test-ring-auth-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_secret_sources_and_limits(void **state)
{
    (void)state;
    struct petrel_error err;
    char *s = NULL;
    unsetenv("TEST_RING_SECRET");
    unsetenv("TEST_RING_SECRET_FILE");
    /* nothing configured: "" */
    assert_true(ring_secret_load("", "TEST_RING_SECRET", "k", &s, &err));
    assert_string_equal(s, "");
    ring_secret_free(s);
    /* the file, trimmed */
    char *path = write_file("  " SECRET "\n\n");
    assert_true(ring_secret_load(path, "TEST_RING_SECRET", "k", &s, &err));
    assert_string_equal(s, SECRET);
    ring_secret_free(s);
    /* <env>_FILE, then env */
    setenv("TEST_RING_SECRET", "from-the-environment-0123", 1);
    assert_true(ring_secret_load("", "TEST_RING_SECRET", "k", &s, &err));
    assert_string_equal(s, "from-the-environment-0123");
    ring_secret_free(s);
    setenv("TEST_RING_SECRET_FILE", path, 1);
    assert_true(ring_secret_load("", "TEST_RING_SECRET", "k", &s, &err));
    assert_string_equal(s, SECRET);
    ring_secret_free(s);
    unlink(path);
    /* an unreadable file: an error naming the file */
    assert_false(ring_secret_load("", "TEST_RING_SECRET", "k", &s, &err));
    assert_non_null(strstr(err.message, path));
    unsetenv("TEST_RING_SECRET_FILE");
    /* a binary file (`openssl rand 32`): refused rather than cut at its first NUL */
    path = write_file(SECRET);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("x", f);
    fputc('\0', f);
    fputs("tail-of-the-secret", f);
    fclose(f);
    assert_false(ring_secret_load(path, "TEST_RING_SECRET", "k", &s, &err));
    assert_non_null(strstr(err.message, "NUL byte"));
    assert_null(strstr(err.message, SECRET));
    unlink(path);
    /* too short: refused, and the message does not show it */
    setenv("TEST_RING_SECRET", "short-secret", 1);
    assert_false(ring_secret_load("", "TEST_RING_SECRET", "k", &s, &err));
    assert_null(strstr(err.message, "short-secret"));
    assert_non_null(strstr(err.message, "at least 16"));
    unsetenv("TEST_RING_SECRET");
}

static void test_director_needs_a_secret_or_the_explicit_setting(void **state)
{
    (void)state;
    struct director_config cfg;
    director_config_defaults(&cfg);
    free(cfg.ring_secret_env);
    cfg.ring_secret_env = strdup("TEST_RING_SECRET");
    unsetenv("TEST_RING_SECRET");
    unsetenv("TEST_RING_SECRET_FILE");
    struct petrel_error err;
    char *s = NULL;
    assert_false(director_config_ring_secret(&cfg, &s, &err));
    assert_non_null(strstr(err.message, "director.ring.allow_unauthenticated"));
    cfg.ring_allow_unauthenticated = true;
    assert_true(director_config_ring_secret(&cfg, &s, &err));
    assert_string_equal(s, "");
    ring_secret_free(s);
    /* the default allow-list is loopback only */
    assert_string_equal(cfg.ring_allowed_nets[0], "127.0.0.0/8");
    assert_string_equal(cfg.ring_allowed_nets[1], "::1/128");
    assert_null(cfg.ring_allowed_nets[2]);
    director_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proofs_match_independent_vectors),
        cmocka_unit_test(test_check_refuses_every_near_miss),
        cmocka_unit_test(test_nonces_are_fresh_hex),
        cmocka_unit_test(test_auth_lines_decode_and_roundtrip),
        cmocka_unit_test(test_secret_sources_and_limits),
        cmocka_unit_test(test_director_needs_a_secret_or_the_explicit_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
