/* Unit tests for protocols/common/mail-login-config.h: the defaults a
 * section asks for, every shared key read, the --check-config pieces
 * printed exactly, and an exact `file:line: <section>.<key>: message` for
 * each kind of mistake. The section here is a made-up "mail" one, so
 * nothing of imap's or pop3's own choices leaks in. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/yaml-doc.h"
#include "protocols/common/mail-login-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct mail_login_section section = {
    .name = "mail",
    .listen = ":1143",
    .max_connections_per_user = 4,
    .idle_timeout_ms = 2 * 3600 * 1000,
    .min_idle_timeout_ms = 5000,
};

/* Reads `text` (a document whose root holds the `mail:` map) the way a
 * protocol section does; false with the message in `err`. */
static bool read_section(const char *text, bool required, struct mail_login_config *cfg,
                         struct petrel_error *err)
{
    struct ydoc *doc = ydoc_parse("t.yaml", text, strlen(text), err);
    if (doc == NULL)
        fail_msg("YAML refused: %s", err->message);
    const struct ynode *node = ynode_get(doc->root, "mail");
    struct cfg_ctx ctx = {.file = "t.yaml", .err = err};
    static const char *const keys[] = {MAIL_LOGIN_CONFIG_KEYS, NULL};
    bool ok = cfg_expect_map(&ctx, node, "mail") && cfg_check_keys(&ctx, node, "mail", keys) &&
              mail_login_config_read_endpoints(&ctx, node, &section, cfg) &&
              mail_login_config_read_limits(&ctx, node, &section, cfg) &&
              mail_login_config_read_timeouts(&ctx, node, &section, cfg) &&
              mail_login_config_check(&ctx, node, &section, required, cfg);
    ydoc_free(doc);
    return ok;
}

static void expect_error(const char *text, bool required, const char *message)
{
    struct mail_login_config cfg;
    mail_login_config_defaults(&cfg, &section);
    struct petrel_error err = {0};
    bool ok = read_section(text, required, &cfg, &err);
    mail_login_config_free(&cfg);
    if (ok)
        fail_msg("config accepted, expected: %s", message);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strcmp(err.message, message) != 0)
        fail_msg("message\n  got:      %s\n  expected: %s", err.message, message);
}

static char *print_all(const struct mail_login_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    mail_login_config_print_endpoints(cfg, out);
    fputs("--\n", out);
    mail_login_config_print_limits(cfg, out);
    fputs("--\n", out);
    mail_login_config_print_timeouts(cfg, out);
    fclose(out);
    return text;
}

static void test_defaults_follow_the_section(void **state)
{
    (void)state;
    struct mail_login_config cfg;
    mail_login_config_defaults(&cfg, &section);
    assert_string_equal(cfg.listen[0], ":1143");
    assert_null(cfg.listen[1]);
    assert_null(cfg.login_trusted_networks[0]); /* nobody may forward an address */
    assert_null(cfg.listen_tls[0]);
    assert_null(cfg.tls_cert_file);
    assert_null(cfg.tls_key_file);
    assert_string_equal(cfg.auth_addr, "127.0.0.1:10200");
    assert_string_equal(cfg.warden_addr, "");
    assert_true(cfg.disable_plaintext_auth);
    assert_int_equal(cfg.max_connections, 10000);
    assert_int_equal(cfg.max_connections_per_user, 4);
    assert_int_equal(cfg.login_timeout_ms, 60000);
    assert_int_equal(cfg.idle_timeout_ms, 7200000);
    assert_int_equal(cfg.auth_timeout_ms, 30000);
    /* An absent section keeps every default and passes the checks. */
    struct petrel_error err = {0};
    assert_true(read_section("other: 1\n", true, &cfg, &err));
    assert_string_equal(cfg.listen[0], ":1143");
    mail_login_config_free(&cfg);
    assert_null(cfg.listen);
    assert_null(cfg.auth_addr);
}

static void test_every_key_is_read_and_printed(void **state)
{
    (void)state;
    struct mail_login_config cfg;
    mail_login_config_defaults(&cfg, &section);
    struct petrel_error err = {0};
    const char *text = "mail:\n"
                       "  listen: [\"127.0.0.1:1\", \"[::1]:2\"]\n"
                       "  listen_tls: [\"127.0.0.1:3\"]\n"
                       "  tls_cert_file: /c.pem\n"
                       "  tls_key_file: /k.pem\n"
                       "  auth_addr: \"unix:/run/auth\"\n"
                       "  warden_addr: \"127.0.0.1:4\"\n"
                       "  disable_plaintext_auth: false\n"
                       "  max_connections: 7\n"
                       "  max_connections_per_user: 0\n"
                       "  max_connections_per_ip: 3\n"
                       "  per_ip_limit_exempt_nets: [\"10.0.0.0/8\"]\n"
                       "  login_trusted_networks: [\"192.0.2.0/24\", \"2001:db8::/32\"]\n"
                       "  login_timeout: 2s\n"
                       "  idle_timeout: 1h30m\n"
                       "  auth_timeout: 250ms\n";
    if (!read_section(text, true, &cfg, &err))
        fail_msg("refused: %s", err.message);
    assert_string_equal(cfg.listen[1], "[::1]:2");
    assert_int_equal(cfg.idle_timeout_ms, 5400000);
    char *printed = print_all(&cfg);
    assert_string_equal(printed, "  listen:\n"
                                 "    - \"127.0.0.1:1\"\n"
                                 "    - \"[::1]:2\"\n"
                                 "  listen_tls:\n"
                                 "    - \"127.0.0.1:3\"\n"
                                 "  tls_cert_file: \"/c.pem\"\n"
                                 "  tls_key_file: \"/k.pem\"\n"
                                 "  auth_addr: \"unix:/run/auth\"\n"
                                 "  warden_addr: \"127.0.0.1:4\"\n"
                                 "--\n"
                                 "  max_connections: 7\n"
                                 "  max_connections_per_user: 0\n"
                                 "  max_connections_per_ip: 3\n"
                                 "  per_ip_limit_exempt_nets:\n"
                                 "    - \"10.0.0.0/8\"\n"
                                 "  login_trusted_networks:\n"
                                 "    - \"192.0.2.0/24\"\n"
                                 "    - \"2001:db8::/32\"\n"
                                 "--\n"
                                 "  login_timeout: 2000ms\n"
                                 "  idle_timeout: 5400000ms\n"
                                 "  auth_timeout: 250ms\n");
    free(printed);
    assert_false(cfg.disable_plaintext_auth);
    mail_login_config_free(&cfg);
}

static void test_addresses_are_checked_where_they_stand(void **state)
{
    (void)state;
    expect_error("mail:\n  listen:\n    - \"127.0.0.1:1\"\n    - nohost\n", true,
                 "t.yaml:4: mail.listen: invalid address 'nohost' (expected host:port)");
    expect_error("mail:\n  listen_tls: [x]\n", false,
                 "t.yaml:2: mail.listen_tls: invalid address 'x' (expected host:port)");
    expect_error("mail:\n  warden_addr: nope\n", false,
                 "t.yaml:2: mail.warden_addr: invalid address 'nope' (expected host:port)");
    expect_error("mail:\n  listen: 5\n", true,
                 "t.yaml:2: mail.listen: expected a list, found a scalar");
}

static void test_bounds(void **state)
{
    (void)state;
    expect_error("mail:\n  max_connections: 0\n", true,
                 "t.yaml:2: mail.max_connections: 0 is out of range [1, 10000000]");
    expect_error("mail:\n  max_connections_per_user: 100001\n", true,
                 "t.yaml:2: mail.max_connections_per_user: 100001 is out of range [0, 100000]");
    expect_error("mail:\n  max_connections_per_ip: -1\n", true,
                 "t.yaml:2: mail.max_connections_per_ip: -1 is out of range [0, 10000000]");
    expect_error("mail:\n  per_ip_limit_exempt_nets: [\"10.0.0.1/8\"]\n", true,
                 "t.yaml:2: mail.per_ip_limit_exempt_nets: '10.0.0.1/8' has host bits set "
                 "beyond the prefix");
    expect_error("mail:\n  login_timeout: 999ms\n", true,
                 "t.yaml:2: mail.login_timeout: duration out of range [1000ms, 3600000ms]");
    /* The section's own minimum. */
    expect_error("mail:\n  idle_timeout: 4s\n", true,
                 "t.yaml:2: mail.idle_timeout: duration out of range [5000ms, 86400000ms]");
    expect_error("mail:\n  auth_timeout: 11m\n", true,
                 "t.yaml:2: mail.auth_timeout: duration out of range [100ms, 600000ms]");
    expect_error("mail:\n  disable_plaintext_auth: maybe\n", true,
                 "t.yaml:2: mail.disable_plaintext_auth: expected true or false, found 'maybe'");
    expect_error("mail:\n  frobnicate: 1\n", true, "t.yaml:2: mail.frobnicate: unknown key");
}

static void test_checks_after_reading(void **state)
{
    (void)state;
    expect_error("mail:\n  tls_cert_file: /c.pem\n", false,
                 "t.yaml:2: mail: tls_cert_file and tls_key_file go together");
    expect_error("mail:\n  listen: []\n", true, "t.yaml:2: mail: needs listen or listen_tls");
    expect_error("mail:\n  listen_tls: [\"127.0.0.1:3\"]\n", true,
                 "t.yaml:2: mail.listen_tls: needs tls_cert_file and tls_key_file");
    expect_error("mail:\n  auth_addr: \"\"\n", true,
                 "t.yaml:2: mail: auth_addr is required (the auth service)");
    /* A component that does not run needs no listener, TLS files or auth. */
    struct mail_login_config cfg;
    mail_login_config_defaults(&cfg, &section);
    struct petrel_error err = {0};
    assert_true(read_section("mail:\n  listen: []\n  listen_tls: [\"127.0.0.1:3\"]\n"
                             "  auth_addr: \"\"\n",
                             false, &cfg, &err));
    mail_login_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_follow_the_section),
        cmocka_unit_test(test_every_key_is_read_and_printed),
        cmocka_unit_test(test_addresses_are_checked_where_they_stand),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_checks_after_reading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
