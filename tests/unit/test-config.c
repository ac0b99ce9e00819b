/* Unit tests for server/config.h: config_parse() of petrel.yaml, its defaults,
 * its environment overrides, and an exact `file:line: key: message` for every
 * class of mistake an operator can make. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/component.h"
#include "server/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int clean_env(void **state)
{
    unsetenv("LOG_LEVEL");
    unsetenv("PETREL_COMPONENT");
    unsetenv("BACKEND_API_TOKEN");
    return 0;
}

static struct petrel_config *parse(const char *text, struct petrel_error *err)
{
    return config_parse("petrel.yaml", text, strlen(text), err);
}

static struct petrel_config *parse_ok(const char *text)
{
    struct petrel_error err = {0};
    struct petrel_config *cfg = parse(text, &err);
    if (cfg == NULL)
        fail_msg("config refused: %s", err.message);
    return cfg;
}

static void expect_error(const char *text, const char *message)
{
    struct petrel_error err = {0};
    struct petrel_config *cfg = parse(text, &err);
    if (cfg != NULL) {
        config_free(cfg);
        fail_msg("config accepted, expected: %s", message);
    }
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strcmp(err.message, message) != 0)
        fail_msg("message\n  got:      %s\n  expected: %s", err.message, message);
}

static size_t strv_len(char **v)
{
    size_t n = 0;
    while (v != NULL && v[n] != NULL)
        n++;
    return n;
}

static void assert_defaults(const struct petrel_config *cfg)
{
    assert_string_equal(cfg->file, "petrel.yaml");
    assert_int_equal(strv_len(cfg->components), 1);
    assert_string_equal(cfg->components[0], "backend-api");
    assert_true(config_has_component(cfg, "backend-api"));
    assert_false(config_has_component(cfg, "director"));
    assert_int_equal(cfg->log.base, LOG_INFO);
    assert_int_equal(cfg->log.override_count, 0);
    assert_null(cfg->user);
    assert_null(cfg->group);
    assert_false(cfg->allow_root);
    assert_int_equal(cfg->shutdown_timeout_ms, 10000);

    assert_string_equal(cfg->telemetry.listen, ":8080");
    assert_null(cfg->telemetry.allowed_nets);
    assert_int_equal(cfg->telemetry.check_count, 0);
    assert_int_equal(cfg->telemetry.readiness_deadline_ms, 800);

    assert_false(cfg->internal_tls.enabled);
    assert_true(cfg->internal_tls.require_client_cert);
    assert_null(cfg->internal_tls.cert_file);

    /* loopback, not the spec's ":9105" (docs/decisions.md) */
    assert_string_equal(cfg->backend_api.listen, "127.0.0.1:9105");
    assert_false(cfg->backend_api.allow_unauthenticated_remote);
    assert_string_equal(cfg->telemetry.token_env, "TELEMETRY_TOKEN");
    assert_false(cfg->telemetry.allow_unauthenticated_remote);
    assert_null(cfg->backend_api.allowed_nets);
    assert_string_equal(cfg->backend_api.token_env, "BACKEND_API_TOKEN");
    assert_string_equal(cfg->backend_api.auth_master_addr, "");
    assert_int_equal(cfg->backend_api.request_timeout_ms, 30000);
    assert_int_equal(cfg->backend_api.stream_timeout_ms, 300000);
    assert_int_equal(cfg->backend_api.max_body_bytes, 1024 * 1024);
    assert_int_equal(cfg->backend_api.max_connections, 4096);
}

/* ---- valid configurations ------------------------------------------------ */

static void test_empty_file_gives_defaults(void **state)
{
    static const char *const empties[] = {"", "# nothing here\n", "---\n", "{}\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        struct petrel_config *cfg = parse_ok(empties[i]);
        assert_defaults(cfg);
        config_free(cfg);
    }
}

static void test_minimal_config_gives_defaults(void **state)
{
    struct petrel_config *cfg = parse_ok("components:\n  - backend-api\n");
    assert_defaults(cfg);
    config_free(cfg);
}

static void test_empty_sections_give_defaults(void **state)
{
    struct petrel_config *cfg =
        parse_ok("telemetry:\nbackend_api:\ninternal_tls:\nlog_level_overrides:\nlog_level: ~\n");
    assert_defaults(cfg);
    config_free(cfg);
}

static const char full_config[] = "components: [backend-api]\n"
                                  "log_level: warn\n"
                                  "log_level_overrides:\n"
                                  "  backend-api: debug\n"
                                  "  http: ERROR\n"
                                  "user: petrel\n"
                                  "group: mail\n"
                                  "allow_root: false\n"
                                  "shutdown_timeout: 1m30s\n"
                                  "telemetry:\n"
                                  "  listen: \"127.0.0.1:18080\"\n"
                                  "  allowed_nets: [10.0.0.0/8, \"::1\"]\n"
                                  "  readiness_deadline: 2s\n"
                                  "  readiness_checks:\n"
                                  "    - name: redis\n"
                                  "      tcp: 127.0.0.1:6379\n"
                                  "    - {name: director, tcp: \"[::1]:9103\", tls: true}\n"
                                  "internal_tls:\n"
                                  "  enabled: yes\n"
                                  "  cert_file: /etc/petrel/tls/cert.pem\n"
                                  "  key_file: /etc/petrel/tls/key.pem\n"
                                  "  ca_file: /etc/petrel/tls/ca.pem\n"
                                  "  require_client_cert: off\n"
                                  "backend_api:\n"
                                  "  listen: \"[::]:19105\"\n"
                                  "  allowed_nets:\n"
                                  "    - 192.168.0.0/16\n"
                                  "  token_env: PETREL_TEST_TOKEN\n"
                                  "  auth_master_addr: unix:/run/petrel/auth-master\n"
                                  "  request_timeout: 45\n"
                                  "  stream_timeout: 1h\n"
                                  "  max_body_bytes: 2097152\n"
                                  "  max_connections: 100\n";

static void test_full_config_sets_every_field(void **state)
{
    struct petrel_config *cfg = parse_ok(full_config);
    assert_int_equal(strv_len(cfg->components), 1);
    assert_string_equal(cfg->components[0], "backend-api");
    assert_int_equal(cfg->log.base, LOG_WARN);
    assert_int_equal(cfg->log.override_count, 2);
    assert_string_equal(cfg->log.overrides[0].component, "backend-api");
    assert_int_equal(cfg->log.overrides[0].level, LOG_DEBUG);
    assert_string_equal(cfg->log.overrides[1].component, "http");
    assert_int_equal(cfg->log.overrides[1].level, LOG_ERROR);
    assert_string_equal(cfg->user, "petrel");
    assert_string_equal(cfg->group, "mail");
    assert_false(cfg->allow_root);
    assert_int_equal(cfg->shutdown_timeout_ms, 90000);

    assert_string_equal(cfg->telemetry.listen, "127.0.0.1:18080");
    assert_int_equal(strv_len(cfg->telemetry.allowed_nets), 2);
    assert_string_equal(cfg->telemetry.allowed_nets[1], "::1");
    assert_int_equal(cfg->telemetry.readiness_deadline_ms, 2000);
    assert_int_equal(cfg->telemetry.check_count, 2);
    assert_string_equal(cfg->telemetry.checks[0].name, "redis");
    assert_string_equal(cfg->telemetry.checks[0].tcp, "127.0.0.1:6379");
    assert_false(cfg->telemetry.checks[0].tls);
    assert_string_equal(cfg->telemetry.checks[1].name, "director");
    assert_string_equal(cfg->telemetry.checks[1].tcp, "[::1]:9103");
    assert_true(cfg->telemetry.checks[1].tls);

    assert_true(cfg->internal_tls.enabled);
    assert_string_equal(cfg->internal_tls.cert_file, "/etc/petrel/tls/cert.pem");
    assert_string_equal(cfg->internal_tls.key_file, "/etc/petrel/tls/key.pem");
    assert_string_equal(cfg->internal_tls.ca_file, "/etc/petrel/tls/ca.pem");
    assert_false(cfg->internal_tls.require_client_cert);

    const struct backend_api_config *b = &cfg->backend_api;
    assert_string_equal(b->listen, "[::]:19105");
    assert_int_equal(strv_len(b->allowed_nets), 1);
    assert_string_equal(b->allowed_nets[0], "192.168.0.0/16");
    assert_string_equal(b->token_env, "PETREL_TEST_TOKEN");
    assert_string_equal(b->auth_master_addr, "unix:/run/petrel/auth-master");
    assert_int_equal(b->request_timeout_ms, 45000);
    assert_int_equal(b->stream_timeout_ms, 3600000);
    assert_int_equal(b->max_body_bytes, 2097152);
    assert_int_equal(b->max_connections, 100);
    config_free(cfg);
}

static void test_config_print_shows_settings_but_never_the_token(void **state)
{
    setenv("PETREL_TEST_TOKEN", "s3cret-token-value", 1);
    struct petrel_config *cfg = parse_ok(full_config);
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_non_null(f);
    config_print(cfg, f);
    fclose(f);
    assert_null(strstr(text, "s3cret"));
    assert_non_null(strstr(text, "token_env: \"PETREL_TEST_TOKEN\""));
    assert_non_null(strstr(text, "listen: \"[::]:19105\""));
    assert_non_null(strstr(text, "log_level: warn\n"));
    assert_non_null(strstr(text, "  http: error\n"));
    assert_non_null(strstr(text, "max_body_bytes: 2097152\n"));
    free(text);
    config_free(cfg);
    unsetenv("PETREL_TEST_TOKEN");

    /* The printed configuration reads back to the same values. */
    cfg = parse_ok(full_config);
    f = open_memstream(&text, &size);
    config_print(cfg, f);
    fclose(f);
    config_free(cfg);
    cfg = parse_ok(text);
    assert_int_equal(cfg->shutdown_timeout_ms, 90000);
    assert_int_equal(cfg->log.override_count, 2);
    assert_int_equal(cfg->telemetry.check_count, 2);
    assert_true(cfg->telemetry.checks[1].tls);
    assert_string_equal(cfg->backend_api.auth_master_addr, "unix:/run/petrel/auth-master");
    assert_int_equal(cfg->backend_api.stream_timeout_ms, 3600000);
    config_free(cfg);
    free(text);
}

static void test_config_load_reads_a_file(void **state)
{
    char path[] = "/tmp/petrel-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "log_level: debug\nbackend_api:\n  max_connections: 0\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct petrel_error err = {0};
    assert_null(config_load(path, &err));
    char expected[256];
    snprintf(expected, sizeof(expected),
             "%s:3: backend_api.max_connections: 0 is out of range [1, 1000000]", path);
    assert_string_equal(err.message, expected);
    unlink(path);
    assert_null(config_load(path, &err));
    assert_int_equal(err.code, PETREL_ERR_IO);
    assert_non_null(strstr(err.message, path));
}

/* ---- one test per failure class -------------------------------------------- */

/* The login proxy's section (server/login-config.h): its keys, its fronts'
 * keys under login.imap / login.pop3, and what a running login needs. */
static void test_login_section(void **state)
{
    (void)state;
    struct petrel_error err = {0};
    static const char ok[] = "components: [login]\n"
                             "login:\n"
                             "  directors: [\"127.0.0.1:9102\", \"127.0.0.2:9102\"]\n"
                             "  transient_retries: -1\n"
                             "  director_timeout: 500ms\n"
                             "  imap:\n"
                             "    listen: [\"127.0.0.1:11143\"]\n"
                             "  pop3:\n"
                             "    listen: [\"127.0.0.1:11110\"]\n"
                             "    backend_port: 1110\n";
    struct petrel_config *cfg = parse(ok, &err);
    assert_non_null(cfg);
    assert_int_equal(cfg->login.transient_retries, -1);
    assert_int_equal(cfg->login.director_timeout_ms, 500);
    assert_true(cfg->login.imap.enabled);
    assert_int_equal(cfg->login.imap.backend_port, 0);
    assert_true(cfg->login.pop3.enabled);
    assert_int_equal(cfg->login.pop3.backend_port, 1110);
    assert_string_equal(cfg->login.directors[1], "127.0.0.2:9102");
    config_free(cfg);
    /* defaults when login does not run */
    cfg = parse("log_level: info\n", &err);
    assert_non_null(cfg);
    assert_int_equal(cfg->login.transient_retries, 3);
    assert_int_equal(cfg->login.backend_timeout_ms, 10000);
    assert_false(cfg->login.imap.enabled);
    assert_int_equal(cfg->login.pop3.backend_port, 110);
    config_free(cfg);
    expect_error(
        "components: [login]\nlogin:\n  imap: {listen: [\"127.0.0.1:1\"]}\n",
        "petrel.yaml:3: login.directors: at least one director's ring address is required");
    expect_error("components: [login]\nlogin:\n  directors: [\"127.0.0.1:9102\"]\n",
                 "petrel.yaml:3: login: needs at least one front: imap, pop3 or lmtp");
    expect_error("login:\n  transient_retry: 3\n",
                 "petrel.yaml:2: login.transient_retry: unknown key");
    expect_error("login:\n  imap:\n    backend_port: 70000\n",
                 "petrel.yaml:3: login.imap.backend_port: 70000 is out of range [0, 65535]");
    expect_error("login:\n  transient_retries: -2\n",
                 "petrel.yaml:2: login.transient_retries: -2 is out of range [-1, 100]");
    expect_error("login:\n  pop3:\n    idle_timeout: 10m\n",
                 "petrel.yaml:3: login.pop3.idle_timeout: unknown key");
    expect_error(
        "login:\n  imap:\n    listen: [\"nowhere\"]\n",
        "petrel.yaml:3: login.imap.listen: invalid address 'nowhere' (expected host:port)");
}

static void test_unknown_top_level_key(void **state)
{
    expect_error("log_level: info\n\nlog_levle: debug\n", "petrel.yaml:3: log_levle: unknown key");
}

static void test_unknown_nested_key(void **state)
{
    expect_error("telemetry:\n  listen: \":8080\"\n  allowed_net: []\n",
                 "petrel.yaml:3: telemetry.allowed_net: unknown key");
    expect_error("backend_api:\n  token: abc\n", "petrel.yaml:2: backend_api.token: unknown key");
    expect_error("internal_tls:\n  enable: true\n",
                 "petrel.yaml:2: internal_tls.enable: unknown key");
    expect_error("telemetry:\n  readiness_checks:\n    - name: a\n      tcp: 127.0.0.1:1\n"
                 "      port: 5\n",
                 "petrel.yaml:5: telemetry.readiness_checks.port: unknown key");
}

static void test_section_that_is_not_a_mapping(void **state)
{
    expect_error("telemetry: 8080\n",
                 "petrel.yaml:1: telemetry: expected a mapping, found a scalar");
    expect_error("backend_api:\n  - listen\n",
                 "petrel.yaml:2: backend_api: expected a mapping, found a list");
    expect_error("log_level_overrides: [debug]\n",
                 "petrel.yaml:1: log_level_overrides: expected a mapping, found a list");
}

static void test_whole_file_that_is_not_a_mapping(void **state)
{
    expect_error("- backend-api\n", "petrel.yaml:1: expected a mapping, found a list");
    expect_error("just text\n", "petrel.yaml:1: expected a mapping, found a scalar");
}

static void test_list_where_a_scalar_is_expected(void **state)
{
    expect_error("log_level: [debug]\n",
                 "petrel.yaml:1: log_level: expected a scalar, found a list");
    expect_error("backend_api:\n  listen:\n    - \":9105\"\n",
                 "petrel.yaml:3: backend_api.listen: expected a scalar, found a list");
    expect_error("user: {name: petrel}\n",
                 "petrel.yaml:1: user: expected a scalar, found a mapping");
}

static void test_scalar_where_a_list_is_expected(void **state)
{
    expect_error("components: backend-api\n",
                 "petrel.yaml:1: components: expected a list, found a scalar");
    expect_error("backend_api:\n  allowed_nets: 10.0.0.0/8\n",
                 "petrel.yaml:2: backend_api.allowed_nets: expected a list, found a scalar");
    expect_error("telemetry:\n  readiness_checks: redis\n",
                 "petrel.yaml:2: telemetry.readiness_checks: expected a list");
}

static void test_string_where_an_integer_is_expected(void **state)
{
    expect_error("backend_api:\n  max_body_bytes: lots\n",
                 "petrel.yaml:2: backend_api.max_body_bytes: expected an integer, found 'lots'");
    expect_error("backend_api:\n  max_connections: \"100\"\n",
                 "petrel.yaml:2: backend_api.max_connections: expected an integer, found '100'");
    expect_error("backend_api:\n  max_connections: 1e3\n",
                 "petrel.yaml:2: backend_api.max_connections: expected an integer, found '1e3'");
}

static void test_string_where_a_bool_is_expected(void **state)
{
    expect_error("allow_root: \"true\"\n",
                 "petrel.yaml:1: allow_root: expected true or false, found a quoted string");
    expect_error("internal_tls:\n  enabled: sometimes\n",
                 "petrel.yaml:2: internal_tls.enabled: expected true or false, found 'sometimes'");
    expect_error(
        "telemetry:\n  readiness_checks:\n    - {name: a, tcp: \"127.0.0.1:1\", tls: 1}\n",
        "petrel.yaml:3: telemetry.readiness_checks.tls: expected true or false, found '1'");
}

static void test_out_of_range_values(void **state)
{
    expect_error(
        "backend_api:\n  max_body_bytes: 1023\n",
        "petrel.yaml:2: backend_api.max_body_bytes: 1023 is out of range [1024, 67108864]");
    expect_error("backend_api:\n  max_body_bytes: 67108865\n",
                 "petrel.yaml:2: backend_api.max_body_bytes: 67108865 is out of range [1024, "
                 "67108864]");
    expect_error("backend_api:\n  max_connections: -1\n",
                 "petrel.yaml:2: backend_api.max_connections: -1 is out of range [1, 1000000]");
    expect_error("telemetry:\n  readiness_deadline: 5ms\n",
                 "petrel.yaml:2: telemetry.readiness_deadline: duration out of range [10ms, "
                 "60000ms]");
    expect_error("telemetry:\n  readiness_deadline: 61s\n",
                 "petrel.yaml:2: telemetry.readiness_deadline: duration out of range [10ms, "
                 "60000ms]");
    expect_error("backend_api:\n  request_timeout: 50ms\n",
                 "petrel.yaml:2: backend_api.request_timeout: duration out of range [100ms, "
                 "3600000ms]");
    expect_error("shutdown_timeout: 2h\n",
                 "petrel.yaml:1: shutdown_timeout: duration out of range [0ms, 3600000ms]");
    /* The bounds themselves are accepted. */
    struct petrel_config *cfg = parse_ok("backend_api:\n  max_body_bytes: 1024\n"
                                         "  max_connections: 1000000\n"
                                         "telemetry:\n  readiness_deadline: 10ms\n"
                                         "shutdown_timeout: 0\n");
    assert_int_equal(cfg->backend_api.max_body_bytes, 1024);
    assert_int_equal(cfg->backend_api.max_connections, 1000000);
    assert_int_equal(cfg->telemetry.readiness_deadline_ms, 10);
    assert_int_equal(cfg->shutdown_timeout_ms, 0);
    config_free(cfg);
}

static void test_bad_duration(void **state)
{
    expect_error("backend_api:\n  stream_timeout: forever\n",
                 "petrel.yaml:2: backend_api.stream_timeout: expected a duration like 30s, 5m or "
                 "250ms, found 'forever'");
    expect_error("shutdown_timeout: 1.5s\n", "petrel.yaml:1: shutdown_timeout: expected a duration "
                                             "like 30s, 5m or 250ms, found '1.5s'");
    expect_error("telemetry:\n  readiness_deadline: -1\n",
                 "petrel.yaml:2: telemetry.readiness_deadline: expected a duration like 30s, 5m or "
                 "250ms, found '-1'");
}

static void test_bad_cidr_in_allowed_nets(void **state)
{
    expect_error("backend_api:\n"
                 "  allowed_nets:\n"
                 "    - 10.0.0.0/8\n"
                 "    - 10.0.0.1/8\n",
                 "petrel.yaml:4: backend_api.allowed_nets: '10.0.0.1/8' has host bits set beyond "
                 "the prefix");
    expect_error("telemetry:\n  allowed_nets: [\"::1\", bogus]\n",
                 "petrel.yaml:2: telemetry.allowed_nets: invalid network address 'bogus'");
    expect_error("telemetry:\n  allowed_nets:\n    - 10.0.0.0/33\n",
                 "petrel.yaml:3: telemetry.allowed_nets: invalid prefix length in '10.0.0.0/33'");
    expect_error("telemetry:\n  allowed_nets:\n    - [10.0.0.0/8]\n",
                 "petrel.yaml:3: telemetry.allowed_nets: list items must be strings, found a list");
}

static void test_bad_listen_address(void **state)
{
    expect_error("backend_api:\n  listen: nowhere\n",
                 "petrel.yaml:2: backend_api.listen: invalid address 'nowhere' (expected "
                 "host:port)");
    expect_error("telemetry:\n\n  listen: \":70000\"\n",
                 "petrel.yaml:3: telemetry.listen: invalid port in ':70000'");
    /* A listener's host name is resolved when the configuration is read. */
    expect_error("backend_api:\n  listen: \"no-such-host.invalid:9105\"\n",
                 "petrel.yaml:2: backend_api.listen: cannot resolve 'no-such-host.invalid': Name "
                 "or service not known");
    expect_error("backend_api:\n  listen: \"bad_host!:9105\"\n",
                 "petrel.yaml:2: backend_api.listen: invalid address 'bad_host!:9105' (expected "
                 "host:port, [ipv6]:port or unix:/path)");
    expect_error("backend_api:\n  listen: \"unix:\"\n",
                 "petrel.yaml:2: backend_api.listen: invalid unix socket path 'unix:'");
    expect_error("backend_api:\n  listen: \"\"\n",
                 "petrel.yaml:2: backend_api.listen: invalid address '' (expected host:port)");
}

static void test_bad_readiness_checks(void **state)
{
    expect_error("telemetry:\n  readiness_checks:\n    - name: redis\n",
                 "petrel.yaml:3: telemetry.readiness_checks: tcp (host:port) is required");
    expect_error("telemetry:\n  readiness_checks:\n    - tcp: \"127.0.0.1:1\"\n",
                 "petrel.yaml:3: telemetry.readiness_checks: name is required");
    expect_error("telemetry:\n  readiness_checks:\n    - redis\n",
                 "petrel.yaml:3: telemetry.readiness_checks: each check is a mapping with name and "
                 "tcp");
    expect_error("telemetry:\n  readiness_checks:\n    - name: r\n      tcp: redis\n",
                 "petrel.yaml:4: telemetry.readiness_checks.tcp: invalid address 'redis' (expected "
                 "host:port)");
    /* Probed from the loop without a lookup: an IP address. */
    expect_error("telemetry:\n  readiness_checks:\n    - name: r\n      tcp: \"redis:6379\"\n",
                 "petrel.yaml:4: telemetry.readiness_checks.tcp: invalid address 'redis:6379' "
                 "(expected an IP address, not a host name)");
}

static void test_unknown_component(void **state)
{
    expect_error("components:\n  - backend-api\n  - imap-proxy\n",
                 "petrel.yaml:3: components: unknown component 'imap-proxy'");
    expect_error("components: [smtp-relay]\n",
                 "petrel.yaml:1: components: unknown component 'smtp-relay'");
    expect_error("components:\n  - backend-api\n\n  - backend-api\n",
                 "petrel.yaml:4: components: 'backend-api' listed twice");
}

static void test_duplicate_key(void **state)
{
    expect_error("backend_api:\n  listen: \":1\"\n  max_connections: 5\n  listen: \":2\"\n",
                 "petrel.yaml:4: backend_api.listen: duplicate key (first at line 2)");
    expect_error("log_level: info\nuser: a\nlog_level: debug\n",
                 "petrel.yaml:3: log_level: duplicate key (first at line 1)");
}

static void test_yaml_syntax_error(void **state)
{
    struct petrel_error err = {0};
    assert_null(parse("log_level: info\ntelemetry:\n  listen: [\":8080\"\nuser: x\n", &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_true(strncmp(err.message, "petrel.yaml:4: ", 15) == 0);
    assert_null(parse("a: 1\n\tb: 2\n", &err));
    assert_true(strncmp(err.message, "petrel.yaml:2: ", 15) == 0);
}

static void test_aliases_and_anchors_refused(void **state)
{
    expect_error("telemetry:\n  allowed_nets: &nets [10.0.0.0/8]\n"
                 "backend_api:\n  allowed_nets: *nets\n",
                 "petrel.yaml:2: telemetry.allowed_nets: anchors are not supported");
    expect_error("user: *x\n", "petrel.yaml:1: user: aliases are not supported");
}

static void test_second_yaml_document_refused(void **state)
{
    expect_error("log_level: info\n---\nlog_level: debug\n",
                 "petrel.yaml:2: only one YAML document allowed");
}

static void test_bad_log_level(void **state)
{
    expect_error("log_level: loud\n",
                 "petrel.yaml:1: log_level: expected debug, info, warn or error");
    struct petrel_config *cfg = parse_ok("log_level: Warning\n");
    assert_int_equal(cfg->log.base, LOG_WARN);
    config_free(cfg);
}

static void test_internal_tls_needs_cert_and_key(void **state)
{
    expect_error("internal_tls:\n  enabled: true\n  cert_file: /c.pem\n",
                 "petrel.yaml:2: internal_tls: enabled needs cert_file and key_file");
    struct petrel_config *cfg = parse_ok("internal_tls:\n  enabled: false\n  cert_file: /c.pem\n");
    assert_false(cfg->internal_tls.enabled);
    config_free(cfg);
}

/* ---- log_level_overrides ------------------------------------------------- */

static void test_log_level_overrides(void **state)
{
    struct petrel_config *cfg =
        parse_ok("log_level: error\nlog_level_overrides:\n  telemetry: debug\n  http: warn\n");
    assert_int_equal(cfg->log.base, LOG_ERROR);
    assert_int_equal(cfg->log.override_count, 2);
    assert_string_equal(cfg->log.overrides[0].component, "telemetry");
    assert_int_equal(cfg->log.overrides[0].level, LOG_DEBUG);
    assert_string_equal(cfg->log.overrides[1].component, "http");
    assert_int_equal(cfg->log.overrides[1].level, LOG_WARN);
    config_free(cfg);
}

static void test_log_level_overrides_refusals(void **state)
{
    expect_error("log_level_overrides:\n  telemetry: debug\n  http: chatty\n",
                 "petrel.yaml:3: log_level_overrides.http: expected debug, info, warn or error");
    expect_error("log_level_overrides:\n  http:\n    - debug\n",
                 "petrel.yaml:3: log_level_overrides.http: expected debug, info, warn or error");
    char text[512];
    snprintf(text, sizeof(text), "log_level_overrides:\n  %s: debug\n",
             "a-component-name-that-is-far-too-long-for-the-table");
    expect_error(text, "petrel.yaml:2: log_level_overrides.a-component-name-that-is-far-too-long-"
                       "for-the-table: component name too long");

    /* At most LOG_MAX_OVERRIDES entries. */
    char many[4096] = "log_level_overrides:\n";
    for (int i = 0; i < LOG_MAX_OVERRIDES; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "  c%d: info\n", i);
    struct petrel_config *cfg = parse_ok(many);
    assert_int_equal(cfg->log.override_count, LOG_MAX_OVERRIDES);
    assert_string_equal(cfg->log.overrides[LOG_MAX_OVERRIDES - 1].component, "c31");
    config_free(cfg);
    snprintf(many + strlen(many), sizeof(many) - strlen(many), "  extra: info\n");
    expect_error(many, "petrel.yaml:2: log_level_overrides: more than 32 entries");
}

/* ---- environment overrides ---------------------------------------------- */

static void test_env_log_level_overrides_the_file(void **state)
{
    setenv("LOG_LEVEL", "debug", 1);
    struct petrel_config *cfg = parse_ok("log_level: error\n");
    assert_int_equal(cfg->log.base, LOG_DEBUG);
    config_free(cfg);

    setenv("LOG_LEVEL", "WARN", 1);
    cfg = parse_ok("");
    assert_int_equal(cfg->log.base, LOG_WARN);
    config_free(cfg);

    /* Empty means unset. */
    setenv("LOG_LEVEL", "", 1);
    cfg = parse_ok("log_level: error\n");
    assert_int_equal(cfg->log.base, LOG_ERROR);
    config_free(cfg);
    unsetenv("LOG_LEVEL");
}

static void test_env_log_level_invalid_value_is_refused(void **state)
{
    setenv("LOG_LEVEL", "verbose", 1);
    expect_error("log_level: info\n",
                 "LOG_LEVEL: expected debug, info, warn or error, found 'verbose'");
    unsetenv("LOG_LEVEL");
}

static void test_env_component_overrides_the_file(void **state)
{
    setenv("PETREL_COMPONENT", "backend-api", 1);
    struct petrel_config *cfg = parse_ok("components: []\n");
    assert_int_equal(strv_len(cfg->components), 1);
    assert_true(config_has_component(cfg, "backend-api"));
    config_free(cfg);

    setenv("PETREL_COMPONENT", " backend-api , ", 1);
    cfg = parse_ok("");
    assert_int_equal(strv_len(cfg->components), 1);
    assert_string_equal(cfg->components[0], "backend-api");
    config_free(cfg);

    /* Empty, or nothing but separators, is ignored: the file's list stands. */
    setenv("PETREL_COMPONENT", "", 1);
    cfg = parse_ok("components: []\n");
    assert_int_equal(strv_len(cfg->components), 0);
    assert_false(config_has_component(cfg, "backend-api"));
    config_free(cfg);
    setenv("PETREL_COMPONENT", " , ,", 1);
    cfg = parse_ok("components: []\n");
    assert_int_equal(strv_len(cfg->components), 0);
    config_free(cfg);
    cfg = parse_ok("");
    assert_int_equal(strv_len(cfg->components), 1);
    assert_string_equal(cfg->components[0], "backend-api");
    config_free(cfg);
    unsetenv("PETREL_COMPONENT");
}

static void test_env_component_invalid_value_is_refused(void **state)
{
    setenv("PETREL_COMPONENT", "backend-api,smtp-relay", 1);
    expect_error("", "PETREL_COMPONENT: unknown component 'smtp-relay'");
    setenv("PETREL_COMPONENT", "Backend-API", 1);
    expect_error("", "PETREL_COMPONENT: unknown component 'Backend-API'");
    unsetenv("PETREL_COMPONENT");
}

static void test_file_errors_come_before_env_errors(void **state)
{
    setenv("LOG_LEVEL", "verbose", 1);
    expect_error("bogus: 1\n", "petrel.yaml:1: bogus: unknown key");
    unsetenv("LOG_LEVEL");
}

static void test_component_names_are_listed(void **state)
{
    /* Every name the spec gives a component is in the table, once, with
     * every function the daemon calls unconditionally. */
    static const char *const spec[] = {"backend-api",  "auth",  "imap",    "warden",
                                       "pop3",         "lmtp",  "monitor", "director",
                                       "quota-status", "login", NULL};
    for (size_t i = 0; spec[i] != NULL; i++)
        assert_non_null(component_find(spec[i]));
    assert_null(component_find("bogus"));
    assert_int_equal(component_count(), 10);
    for (size_t i = 0; component_table[i] != NULL; i++) {
        const struct component_def *c = component_table[i];
        assert_ptr_equal(component_find(c->name), c);
        assert_non_null(c->config_defaults);
        assert_non_null(c->config_read);
        assert_non_null(c->config_print);
        assert_non_null(c->config_free);
        assert_non_null(c->start);
        assert_non_null(c->stop_accepting);
        assert_non_null(c->free);
    }
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, clean_env, clean_env)
    const struct CMUnitTest tests[] = {
        T(test_empty_file_gives_defaults),
        T(test_minimal_config_gives_defaults),
        T(test_empty_sections_give_defaults),
        T(test_full_config_sets_every_field),
        T(test_config_print_shows_settings_but_never_the_token),
        T(test_config_load_reads_a_file),
        T(test_login_section),
        T(test_unknown_top_level_key),
        T(test_unknown_nested_key),
        T(test_section_that_is_not_a_mapping),
        T(test_whole_file_that_is_not_a_mapping),
        T(test_list_where_a_scalar_is_expected),
        T(test_scalar_where_a_list_is_expected),
        T(test_string_where_an_integer_is_expected),
        T(test_string_where_a_bool_is_expected),
        T(test_out_of_range_values),
        T(test_bad_duration),
        T(test_bad_cidr_in_allowed_nets),
        T(test_bad_listen_address),
        T(test_bad_readiness_checks),
        T(test_unknown_component),
        T(test_duplicate_key),
        T(test_yaml_syntax_error),
        T(test_aliases_and_anchors_refused),
        T(test_second_yaml_document_refused),
        T(test_bad_log_level),
        T(test_internal_tls_needs_cert_and_key),
        T(test_log_level_overrides),
        T(test_log_level_overrides_refusals),
        T(test_env_log_level_overrides_the_file),
        T(test_env_log_level_invalid_value_is_refused),
        T(test_env_component_overrides_the_file),
        T(test_env_component_invalid_value_is_refused),
        T(test_file_errors_come_before_env_errors),
        T(test_component_names_are_listed),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
