/* Unit tests for clients/auth/password-scheme.h: hashes made by independent
 * tools verify (and reject wrong passwords), `{SCHEME}` prefixes and default
 * schemes, unknown schemes and malformed hashes give INVALID, fresh hashes
 * round-trip, 8-bit and empty passwords, and verification from several
 * threads at once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clients/auth/password-scheme.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PW "correct horse battery"
#define PW_UTF8 "p\xc3\xa4ssw\xc3\xb6rd" /* "pässwörd" in UTF-8 */
#define PW_LATIN1 "\xe9t\xe9"            /* "été" in ISO-8859-1 */

/* mkpasswd -m sha-512 'correct horse battery' (whois 5.5.17) */
static const char mkpasswd_sha512[] =
    "$6$i.J79pnZHFqVWHAQ$BpAzSe3pff9OTMLvxVQlngkWedHcd7tphW1vOAto."
    ".v4RHX5Iu2gmvx4d69J6AjsoykIZUWxXZyX/JMnLvVJr0";
/* mkpasswd -m sha-512 -R 10000 'correct horse battery' */
static const char mkpasswd_sha512_rounds[] =
    "$6$rounds=10000$SJbLYVYY.BnSoASv$VN.X2AmblBgZpxsfjglHE6.AnLrPuHD/"
    "KM1sv0B9pqBUPfovb4W.yP2CmRjZXG1tCY68NtOa.3Lpkd.69InN41";
/* mkpasswd -m yescrypt 'correct horse battery' */
static const char mkpasswd_yescrypt[] =
    "$y$j9T$RAobgASqRT84VnWBalaAL1$5zbtg9m1hE9ipc/ynPk/9pdu8VPwZmENagd40prmZ58";
/* mkpasswd -m md5 'correct horse battery' */
static const char mkpasswd_md5[] = "$1$xdZLWGKi$f64R9JoYsm8RjOFUNJbys1";
/* htpasswd -bnBC 10 user 'correct horse battery' (apache2-utils 2.4) */
static const char htpasswd_bcrypt[] =
    "$2y$10$vDasOS6xJbeak8kVqHj1GeFYIAQr63ZS3ywmYvfSZUtvgryIslu5a";
/* python3 -c "import crypt; print(crypt.crypt('correct horse battery',
 *   crypt.mksalt(crypt.METHOD_SHA512)))" (Python 3.11) */
static const char python_sha512[] = "$6$QbtLoPG2rQx2oPlV$9Bo91Wpk0j1yULABkB27UXuNHHVB/"
                                    "ayVYwQLyPk6zCulFeNRjGgKQoeCbcsxhEhGkyoct6ssiKXN1JT7tHGGs1";
/* python3: crypt.crypt('correct horse battery', crypt.mksalt(crypt.METHOD_BLOWFISH)) */
static const char python_bcrypt[] = "$2b$12$psYio3uxADsVwK/YibTBGu8uwztOfWN9z07bjqN7qtfuHVNbyLk.e";
/* echo -n 'correct horse battery' | argon2 somesaltsomesalt -id -t 3 -m 12 -p 1 -e
 * (argon2 CLI 0~20171227) */
static const char cli_argon2id[] = "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$"
                                   "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U";

/* The same tools on 8-bit passwords. */
/* python3: crypt.crypt('pässwörd', crypt.mksalt(crypt.METHOD_SHA512)) */
static const char python_sha512_utf8[] =
    "$6$b/zMyISDqDYHBcBC$Vk9uR463sIunh4TTIm.8dEoIlTUTS0Go8TiaH."
    "ll1m/N1H7Eh0IUUw1Jn1lINSA1AflS.zMa73UqMDaQExLer/";
/* mkpasswd -m yescrypt 'pässwörd' (UTF-8 terminal) */
static const char mkpasswd_yescrypt_utf8[] =
    "$y$j9T$smcxn6rldMhjY9w9wCeKR/$r7LN4/Q1DUyVOG78092rHGYVUu01gqjprrIH/a7TzoD";
/* htpasswd -bnBC 10 user 'pässwörd' */
static const char htpasswd_bcrypt_utf8[] =
    "$2y$10$84EbIHjGyc5TakunGPuJGOHwTmPpfbJu0BYE3GhzNd2.O7ECcrX2.";
/* echo -n 'pässwörd' | argon2 saltysaltysalty1 -id -t 3 -m 12 -p 1 -e */
static const char cli_argon2id_utf8[] = "$argon2id$v=19$m=4096,t=3,p=1$c2FsdHlzYWx0eXNhbHR5MQ$"
                                        "l7pQpqWe2vnM7iyTEd4AnWCmL621+7BiZos4UDB0rjY";
/* printf '\xe9t\xe9' | mkpasswd -m sha-512 --stdin */
static const char mkpasswd_sha512_latin1[] =
    "$6$j0S/ZuabQE2uE8A7$a.qi64UOFNpPXNZK60lm9Flg/"
    "Zf4zl4K1vUIYal4dz7GzXC5ji6X1DHrvWfxCZzQdT5NHvSomPMXdZISxCGPn.";

static void expect(const char *stored, const char *password, enum password_scheme default_scheme,
                   enum password_verdict want)
{
    enum password_verdict got = password_verify(stored, password, default_scheme, NULL);
    if (got != want)
        fail_msg("verify(\"%s\", \"%s\") = %d, expected %d", stored ? stored : "(null)",
                 password ? password : "(null)", got, want);
}

/* Checks `hash` under `scheme`: with its prefix (in two spellings) and bare
 * with the scheme as default, for the right password and two wrong ones. */
static void expect_vector(enum password_scheme scheme, const char *hash, const char *password)
{
    char upper[512];
    char lower[512];
    const char *name = password_scheme_name(scheme);
    snprintf(upper, sizeof(upper), "{%s}%s", name, hash);
    snprintf(lower, sizeof(lower), "{%s}", name);
    for (char *p = lower; *p != '\0'; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    strncat(lower, hash, sizeof(lower) - strlen(lower) - 1);

    enum password_scheme used = PASSWORD_SCHEME_UNKNOWN;
    assert_int_equal(password_verify(upper, password, PASSWORD_SCHEME_PLAIN, &used),
                     PASSWORD_MATCH);
    assert_int_equal(used, scheme);
    expect(lower, password, PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect(hash, password, scheme, PASSWORD_MATCH);

    char wrong[256];
    snprintf(wrong, sizeof(wrong), "%sX", password);
    expect(upper, wrong, PASSWORD_SCHEME_PLAIN, PASSWORD_MISMATCH);
    expect(hash, "", scheme, PASSWORD_MISMATCH);
}

static void test_scheme_names(void **state)
{
    (void)state;
    assert_string_equal(password_scheme_name(PASSWORD_SCHEME_PLAIN), "PLAIN");
    assert_string_equal(password_scheme_name(PASSWORD_SCHEME_SHA512_CRYPT), "SHA512-CRYPT");
    assert_string_equal(password_scheme_name(PASSWORD_SCHEME_BLF_CRYPT), "BLF-CRYPT");
    assert_string_equal(password_scheme_name(PASSWORD_SCHEME_CRYPT), "CRYPT");
    assert_string_equal(password_scheme_name(PASSWORD_SCHEME_ARGON2ID), "ARGON2ID");
    assert_int_equal(password_scheme_parse("plain"), PASSWORD_SCHEME_PLAIN);
    assert_int_equal(password_scheme_parse("Sha512-Crypt"), PASSWORD_SCHEME_SHA512_CRYPT);
    assert_int_equal(password_scheme_parse("blf-crypt"), PASSWORD_SCHEME_BLF_CRYPT);
    assert_int_equal(password_scheme_parse("BCRYPT"), PASSWORD_SCHEME_BLF_CRYPT);
    assert_int_equal(password_scheme_parse("crypt"), PASSWORD_SCHEME_CRYPT);
    assert_int_equal(password_scheme_parse("argon2id"), PASSWORD_SCHEME_ARGON2ID);
    assert_int_equal(password_scheme_parse("CLEARTEXT"), PASSWORD_SCHEME_PLAIN);
    assert_int_equal(password_scheme_parse("MD5-CRYPT"), PASSWORD_SCHEME_UNKNOWN);
    assert_int_equal(password_scheme_parse(""), PASSWORD_SCHEME_UNKNOWN);
    assert_int_equal(password_scheme_parse(NULL), PASSWORD_SCHEME_UNKNOWN);
}

static void test_stored_scheme(void **state)
{
    (void)state;
    const char *hash = NULL;
    assert_int_equal(password_stored_scheme("{plain}secret", PASSWORD_SCHEME_CRYPT, &hash),
                     PASSWORD_SCHEME_PLAIN);
    assert_string_equal(hash, "secret");
    assert_int_equal(password_stored_scheme("$6$x$y", PASSWORD_SCHEME_CRYPT, &hash),
                     PASSWORD_SCHEME_CRYPT);
    assert_string_equal(hash, "$6$x$y");
    assert_int_equal(password_stored_scheme("{MD5}abc", PASSWORD_SCHEME_PLAIN, &hash),
                     PASSWORD_SCHEME_UNKNOWN);
    assert_int_equal(password_stored_scheme("{}abc", PASSWORD_SCHEME_PLAIN, &hash),
                     PASSWORD_SCHEME_UNKNOWN);
    assert_int_equal(password_stored_scheme("{unclosed", PASSWORD_SCHEME_PLAIN, &hash),
                     PASSWORD_SCHEME_PLAIN);
    assert_string_equal(hash, "{unclosed");
    assert_int_equal(password_stored_scheme("{PLAIN}", PASSWORD_SCHEME_CRYPT, &hash),
                     PASSWORD_SCHEME_PLAIN);
    assert_string_equal(hash, "");
    assert_int_equal(password_stored_scheme("bare", PASSWORD_SCHEME_UNKNOWN, NULL),
                     PASSWORD_SCHEME_UNKNOWN);
    char long_name[128];
    memset(long_name, 'A', sizeof(long_name));
    long_name[0] = '{';
    long_name[100] = '}';
    long_name[101] = '\0';
    assert_int_equal(password_stored_scheme(long_name, PASSWORD_SCHEME_PLAIN, NULL),
                     PASSWORD_SCHEME_UNKNOWN);
}

static void test_plain(void **state)
{
    (void)state;
    expect_vector(PASSWORD_SCHEME_PLAIN, PW, PW);
    expect("{PLAIN}", "", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect("{PLAIN}", "x", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
    expect("{PLAIN}x", "", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
    expect("{CLEAR}secret", "secret", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect("{PLAIN}secret", "secre", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
    expect("{PLAIN}secret", "Secret", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
    /* A stored value whose text looks like a prefix still belongs to PLAIN. */
    expect("{PLAIN}{SHA512-CRYPT}x", "{SHA512-CRYPT}x", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect("{PLAIN}" PW_UTF8, PW_UTF8, PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect("{PLAIN}" PW_LATIN1, PW_LATIN1, PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    expect("{PLAIN}" PW_LATIN1, "\xc3\xa9t\xc3\xa9", PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
}

static void test_sha512_crypt_vectors(void **state)
{
    (void)state;
    expect_vector(PASSWORD_SCHEME_SHA512_CRYPT, mkpasswd_sha512, PW);
    expect_vector(PASSWORD_SCHEME_SHA512_CRYPT, mkpasswd_sha512_rounds, PW);
    expect_vector(PASSWORD_SCHEME_SHA512_CRYPT, python_sha512, PW);
    expect_vector(PASSWORD_SCHEME_SHA512_CRYPT, python_sha512_utf8, PW_UTF8);
    expect_vector(PASSWORD_SCHEME_SHA512_CRYPT, mkpasswd_sha512_latin1, PW_LATIN1);
    /* The same word in UTF-8 is a different password. */
    expect(mkpasswd_sha512_latin1, "\xc3\xa9t\xc3\xa9", PASSWORD_SCHEME_SHA512_CRYPT,
           PASSWORD_MISMATCH);
}

static void test_blf_crypt_vectors(void **state)
{
    (void)state;
    expect_vector(PASSWORD_SCHEME_BLF_CRYPT, htpasswd_bcrypt, PW);
    expect_vector(PASSWORD_SCHEME_BLF_CRYPT, python_bcrypt, PW);
    expect_vector(PASSWORD_SCHEME_BLF_CRYPT, htpasswd_bcrypt_utf8, PW_UTF8);
    /* $2a$ is the same algorithm for passwords without 8-bit bytes. */
    char twoa[sizeof(htpasswd_bcrypt)];
    memcpy(twoa, htpasswd_bcrypt, sizeof(twoa));
    twoa[2] = 'a';
    expect_vector(PASSWORD_SCHEME_BLF_CRYPT, twoa, PW);
}

static void test_crypt_vectors(void **state)
{
    (void)state;
    expect_vector(PASSWORD_SCHEME_CRYPT, mkpasswd_yescrypt, PW);
    expect_vector(PASSWORD_SCHEME_CRYPT, mkpasswd_yescrypt_utf8, PW_UTF8);
    /* CRYPT takes whatever crypt(3) knows. */
    expect_vector(PASSWORD_SCHEME_CRYPT, mkpasswd_sha512, PW);
    expect_vector(PASSWORD_SCHEME_CRYPT, htpasswd_bcrypt, PW);
    expect_vector(PASSWORD_SCHEME_CRYPT, mkpasswd_md5, PW);
}

static void test_argon2id_vectors(void **state)
{
    (void)state;
    expect_vector(PASSWORD_SCHEME_ARGON2ID, cli_argon2id, PW);
    expect_vector(PASSWORD_SCHEME_ARGON2ID, cli_argon2id_utf8, PW_UTF8);
}

static void test_wrong_scheme_for_hash(void **state)
{
    (void)state;
    char stored[256];
    snprintf(stored, sizeof(stored), "{SHA512-CRYPT}%s", mkpasswd_yescrypt);
    expect(stored, PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
    snprintf(stored, sizeof(stored), "{BLF-CRYPT}%s", mkpasswd_sha512);
    expect(stored, PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
    snprintf(stored, sizeof(stored), "{ARGON2ID}%s", htpasswd_bcrypt);
    expect(stored, PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
    /* A crypt hash stored as PLAIN is just a (wrong) password. */
    snprintf(stored, sizeof(stored), "{PLAIN}%s", mkpasswd_sha512);
    expect(stored, PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_MISMATCH);
}

static void test_unknown_scheme(void **state)
{
    (void)state;
    enum password_scheme used = PASSWORD_SCHEME_PLAIN;
    assert_int_equal(password_verify("{MD5}abc", "abc", PASSWORD_SCHEME_PLAIN, &used),
                     PASSWORD_INVALID);
    assert_int_equal(used, PASSWORD_SCHEME_UNKNOWN);
    expect("{}abc", "abc", PASSWORD_SCHEME_PLAIN, PASSWORD_INVALID);
    expect("abc", "abc", PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
    expect(mkpasswd_sha512, PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
    expect(NULL, "abc", PASSWORD_SCHEME_PLAIN, PASSWORD_INVALID);
    expect("{PLAIN}abc", NULL, PASSWORD_SCHEME_PLAIN, PASSWORD_INVALID);
}

static void test_malformed_hashes(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{SHA512-CRYPT}",
        "{SHA512-CRYPT}$6$",
        "{SHA512-CRYPT}$6$saltonly",
        "{SHA512-CRYPT}$6$i.J79pnZHFqVWHAQ$BpAzSe3pff9OTMLvxVQlngkWedHcd7tphW1vOAto",
        "{SHA512-CRYPT}$6$rounds=abc$salt$hash",
        "{BLF-CRYPT}$2y$10$short",
        "{BLF-CRYPT}$2y$99$vDasOS6xJbeak8kVqHj1GeFYIAQr63ZS3ywmYvfSZUtvgryIslu5a",
        "{BLF-CRYPT}$2y$",
        "{BLF-CRYPT}$2y$10$vDasOS6xJbeak8kVqHj1GeFYIAQr63ZS3ywmYvfSZUtvgryIslu5a$extra",
        "{CRYPT}",
        "{CRYPT}*",
        "{CRYPT}!",
        "{CRYPT}$y$",
        "{CRYPT}$y$j9T$",
        "{CRYPT}$9$nothing",
        "{CRYPT}garbage",
        "{ARGON2ID}",
        "{ARGON2ID}$argon2id$",
        "{ARGON2ID}$argon2id$v=19$m=4096",
        "{ARGON2ID}$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$!!!!",
        "{ARGON2ID}$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA",
        "{ARGON2ID}$argon2id$v=19$m=4096,t=0,p=1$c29tZXNhbHRzb21lc2FsdA$"
        "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U",
        /* Costs a worker must not be made to spend. */
        "{ARGON2ID}$argon2id$v=19$m=4194304,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$"
        "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U",
        "{ARGON2ID}$argon2id$v=19$m=4096,t=99999,p=1$c29tZXNhbHRzb21lc2FsdA$"
        "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U",
        "{ARGON2ID}$argon2id$v=19$m=99999999999999999999,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$"
        "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U",
        "{ARGON2ID}$argon2i$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$"
        "PqbWeYBDSk7ZaWx0GOjGkAc90NY9c7PWPZPKTO+e92U",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect(bad[i], PW, PASSWORD_SCHEME_UNKNOWN, PASSWORD_INVALID);
}

static void round_trip(enum password_scheme scheme, const char *password, const char *shape)
{
    struct petrel_error err = {0};
    char *a = password_hash(scheme, password, &err);
    if (a == NULL)
        fail_msg("password_hash(%s) failed: %s", password_scheme_name(scheme), err.message);
    char *b = password_hash(scheme, password, &err);
    assert_non_null(b);
    if (strncmp(a, shape, strlen(shape)) != 0)
        fail_msg("hash '%s' does not start with '%s'", a, shape);
    if (scheme != PASSWORD_SCHEME_PLAIN)
        assert_string_not_equal(a, b); /* fresh salt each time */

    enum password_scheme used = PASSWORD_SCHEME_UNKNOWN;
    assert_int_equal(password_verify(a, password, PASSWORD_SCHEME_UNKNOWN, &used), PASSWORD_MATCH);
    assert_int_equal(used, scheme);
    assert_int_equal(password_verify(b, password, PASSWORD_SCHEME_UNKNOWN, NULL), PASSWORD_MATCH);
    assert_int_equal(password_verify(a, "not it", PASSWORD_SCHEME_UNKNOWN, NULL),
                     PASSWORD_MISMATCH);
    free(a);
    free(b);
}

static void test_round_trips(void **state)
{
    (void)state;
    round_trip(PASSWORD_SCHEME_PLAIN, PW, "{PLAIN}" PW);
    round_trip(PASSWORD_SCHEME_PLAIN, "", "{PLAIN}");
    round_trip(PASSWORD_SCHEME_SHA512_CRYPT, PW, "{SHA512-CRYPT}$6$");
    round_trip(PASSWORD_SCHEME_SHA512_CRYPT, PW_LATIN1, "{SHA512-CRYPT}$6$");
    round_trip(PASSWORD_SCHEME_SHA512_CRYPT, "", "{SHA512-CRYPT}$6$");
    round_trip(PASSWORD_SCHEME_BLF_CRYPT, PW_UTF8, "{BLF-CRYPT}$2b$10$");
    round_trip(PASSWORD_SCHEME_CRYPT, PW, "{CRYPT}$y$");
    round_trip(PASSWORD_SCHEME_ARGON2ID, PW_UTF8, "{ARGON2ID}$argon2id$v=19$m=65536,t=3,p=1$");

    /* SHA512-CRYPT at 5000 rounds is the default, written without rounds=. */
    char *h = password_hash(PASSWORD_SCHEME_SHA512_CRYPT, PW, NULL);
    assert_null(strstr(h, "rounds="));
    free(h);
}

static void test_hash_errors(void **state)
{
    (void)state;
    struct petrel_error err = {0};
    assert_null(password_hash(PASSWORD_SCHEME_UNKNOWN, PW, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_null(password_hash(PASSWORD_SCHEME_PLAIN, NULL, &err));

    /* libcrypt takes passphrases up to 511 bytes. */
    char long_pw[600];
    memset(long_pw, 'p', sizeof(long_pw) - 1);
    long_pw[sizeof(long_pw) - 1] = '\0';
    petrel_error_clear(&err);
    assert_null(password_hash(PASSWORD_SCHEME_SHA512_CRYPT, long_pw, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    /* ...so such a password matches no crypt hash, but the hash is fine. */
    expect(mkpasswd_sha512, long_pw, PASSWORD_SCHEME_SHA512_CRYPT, PASSWORD_MISMATCH);
    char *plain = password_hash(PASSWORD_SCHEME_PLAIN, long_pw, NULL);
    expect(plain, long_pw, PASSWORD_SCHEME_UNKNOWN, PASSWORD_MATCH);
    free(plain);
}

struct verify_job {
    const char *stored;
    const char *password;
    enum password_verdict want;
    int failures;
};

static void *verify_thread(void *arg)
{
    struct verify_job *job = arg;
    for (int i = 0; i < 10; i++) {
        if (password_verify(job->stored, job->password, PASSWORD_SCHEME_UNKNOWN, NULL) != job->want)
            job->failures++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    char sha[256], yes[256], argon[256];
    snprintf(sha, sizeof(sha), "{SHA512-CRYPT}%s", python_sha512);
    snprintf(yes, sizeof(yes), "{CRYPT}%s", mkpasswd_yescrypt_utf8);
    snprintf(argon, sizeof(argon), "{ARGON2ID}%s", cli_argon2id);
    struct verify_job jobs[] = {
        {sha, PW, PASSWORD_MATCH, 0},      {sha, PW_UTF8, PASSWORD_MISMATCH, 0},
        {yes, PW_UTF8, PASSWORD_MATCH, 0}, {yes, PW, PASSWORD_MISMATCH, 0},
        {argon, PW, PASSWORD_MATCH, 0},    {argon, "", PASSWORD_MISMATCH, 0},
    };
    enum { N = sizeof(jobs) / sizeof(jobs[0]) };
    pthread_t tids[N];
    for (size_t i = 0; i < N; i++)
        assert_int_equal(pthread_create(&tids[i], NULL, verify_thread, &jobs[i]), 0);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(pthread_join(tids[i], NULL), 0);
        assert_int_equal(jobs[i].failures, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scheme_names),
        cmocka_unit_test(test_stored_scheme),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_sha512_crypt_vectors),
        cmocka_unit_test(test_blf_crypt_vectors),
        cmocka_unit_test(test_crypt_vectors),
        cmocka_unit_test(test_argon2id_vectors),
        cmocka_unit_test(test_wrong_scheme_for_hash),
        cmocka_unit_test(test_unknown_scheme),
        cmocka_unit_test(test_malformed_hashes),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_hash_errors),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
