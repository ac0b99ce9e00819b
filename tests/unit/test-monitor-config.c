/* Unit tests for services/monitor/monitor-config.h: every default of
 * document 2's table, every key, the credential lookup with the "" fallback,
 * the file path (MONITOR_CONFIG, config_file, default), and an exact
 * `file:line: key: message` for each kind of mistake. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/yaml-doc.h"
#include "services/monitor/monitor-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int clean_env(void **state)
{
    (void)state;
    unsetenv(MONITOR_CONFIG_ENV);
    return 0;
}

static void parse_ok(struct monitor_config *cfg, const char *text)
{
    monitor_config_defaults(cfg);
    struct petrel_error err = {0};
    if (!monitor_config_parse(cfg, "monitor.yaml", text, strlen(text), &err))
        fail_msg("config refused: %s", err.message);
}

static void expect_error(const char *text, const char *message)
{
    struct monitor_config cfg;
    monitor_config_defaults(&cfg);
    struct petrel_error err = {0};
    bool ok = monitor_config_parse(&cfg, "monitor.yaml", text, strlen(text), &err);
    monitor_config_free(&cfg);
    if (ok)
        fail_msg("config accepted, expected: %s", message);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strcmp(err.message, message) != 0)
        fail_msg("message\n  got:      %s\n  expected: %s", err.message, message);
}

static void assert_table_defaults(const struct monitor_config *cfg)
{
    assert_string_equal(cfg->director_addr, "127.0.0.1:9102");
    assert_true(cfg->poll_imap);
    assert_int_equal(cfg->imap_port, 993);
    assert_true(cfg->imap_tls); /* 993 */
    assert_false(cfg->poll_pop3);
    assert_int_equal(cfg->pop3_port, 110);
    assert_false(cfg->pop3_tls);
    assert_false(cfg->poll_lmtp);
    assert_int_equal(cfg->lmtp_port, 24);
    assert_int_equal(cfg->interval_ms, 10000);
    assert_int_equal(cfg->timeout_ms, 3000);
    assert_int_equal(cfg->retry_count, 3);
    assert_int_equal(cfg->rapid_rounds, 10);
    assert_int_equal(cfg->rapid_fails_needed, 7);
    assert_int_equal(cfg->tag_count, 0);
    /* Petrel's additions */
    assert_null(cfg->tls_ca_file);
    assert_int_equal(cfg->rapid_interval_ms, 1000);
    assert_int_equal(cfg->restore, MONITOR_RESTORE_ANY);
    assert_int_equal(cfg->max_backends, 10000);
    assert_int_equal(cfg->max_line_length, 65536);
    assert_int_equal(cfg->reconnect_min_ms, 200);
    assert_int_equal(cfg->reconnect_max_ms, 10000);
    assert_int_equal(cfg->ping_interval_ms, 30000);
    assert_null(monitor_config_credentials(cfg, ""));
    assert_null(monitor_config_credentials(cfg, "gold"));
}

static void test_defaults(void **state)
{
    (void)state;
    struct monitor_config cfg;
    monitor_config_defaults(&cfg);
    assert_null(cfg.file);
    assert_table_defaults(&cfg);
    monitor_config_free(&cfg);
    /* An empty file and an empty mapping keep every default. */
    parse_ok(&cfg, "");
    assert_string_equal(cfg.file, "monitor.yaml");
    assert_table_defaults(&cfg);
    monitor_config_free(&cfg);
    parse_ok(&cfg, "{}\n");
    assert_table_defaults(&cfg);
    monitor_config_free(&cfg);
}

static void test_every_key(void **state)
{
    (void)state;
    struct monitor_config cfg;
    parse_ok(&cfg, "director_addr: 10.0.0.9:19102\n"
                   "poll_imap: false\n"
                   "imap_port: 143\n"
                   "poll_pop3: yes\n"
                   "pop3_port: 995\n"
                   "poll_lmtp: true\n"
                   "lmtp_port: 2424\n"
                   "tls_ca_file: /etc/petrel/ca.pem\n"
                   "interval: 30\n"
                   "timeout: 5s\n"
                   "rapid_interval: 250ms\n"
                   "retry_count: 5\n"
                   "rapid_rounds: 20\n"
                   "rapid_fails_needed: 20\n"
                   "restore_flushed: own\n"
                   "max_backends: 50\n"
                   "max_line_length: 4096\n"
                   "reconnect_min: 1s\n"
                   "reconnect_max: 1m\n"
                   "ping_interval: 15s\n"
                   "tags:\n"
                   "  \"\":\n"
                   "    user: monitor\n"
                   "    password: \"p@ss w\\\"rd\"\n"
                   "  gold:\n"
                   "    user: gold-probe\n"
                   "    password: \"\"\n");
    assert_string_equal(cfg.director_addr, "10.0.0.9:19102");
    assert_false(cfg.poll_imap);
    assert_int_equal(cfg.imap_port, 143);
    assert_false(cfg.imap_tls); /* 143: plain */
    assert_true(cfg.poll_pop3);
    assert_int_equal(cfg.pop3_port, 995);
    assert_true(cfg.pop3_tls); /* 995: implicit TLS */
    assert_true(cfg.poll_lmtp);
    assert_int_equal(cfg.lmtp_port, 2424);
    assert_string_equal(cfg.tls_ca_file, "/etc/petrel/ca.pem");
    assert_int_equal(cfg.interval_ms, 30000);
    assert_int_equal(cfg.timeout_ms, 5000);
    assert_int_equal(cfg.rapid_interval_ms, 250);
    assert_int_equal(cfg.retry_count, 5);
    assert_int_equal(cfg.rapid_rounds, 20);
    assert_int_equal(cfg.rapid_fails_needed, 20);
    assert_int_equal(cfg.restore, MONITOR_RESTORE_OWN);
    assert_int_equal(cfg.max_backends, 50);
    assert_int_equal(cfg.max_line_length, 4096);
    assert_int_equal(cfg.reconnect_min_ms, 1000);
    assert_int_equal(cfg.reconnect_max_ms, 60000);
    assert_int_equal(cfg.ping_interval_ms, 15000);
    assert_int_equal(cfg.tag_count, 2);
    const struct monitor_credentials *c = monitor_config_credentials(&cfg, "gold");
    assert_non_null(c);
    assert_string_equal(c->user, "gold-probe");
    assert_string_equal(c->password, "");
    /* Untagged and unknown tags fall back to the "" entry. */
    c = monitor_config_credentials(&cfg, "");
    assert_non_null(c);
    assert_string_equal(c->user, "monitor");
    assert_string_equal(c->password, "p@ss w\"rd");
    assert_ptr_equal(monitor_config_credentials(&cfg, "silver"), c);
    assert_ptr_equal(monitor_config_credentials(&cfg, NULL), c);
    monitor_config_free(&cfg);
}

static void test_tls_flags_and_ports(void **state)
{
    (void)state;
    struct monitor_config cfg;
    parse_ok(&cfg, "imap_port: 143\nimap_tls: true\npop3_port: 995\npop3_tls: false\n");
    assert_true(cfg.imap_tls);
    assert_false(cfg.pop3_tls);
    monitor_config_free(&cfg);
    parse_ok(&cfg, "imap_port: 10993\n");
    assert_false(cfg.imap_tls); /* only 993 implies TLS */
    monitor_config_free(&cfg);
    parse_ok(&cfg, "imap_tls: false\n");
    assert_int_equal(cfg.imap_port, 993);
    assert_false(cfg.imap_tls);
    monitor_config_free(&cfg);
    /* Durations as plain seconds and strings, the largest counts. */
    parse_ok(&cfg, "interval: 10ms\ntimeout: 10ms\nrapid_interval: 0\nretry_count: 1000\n"
                   "rapid_rounds: 0\n");
    assert_int_equal(cfg.interval_ms, 10);
    assert_int_equal(cfg.rapid_interval_ms, 0);
    assert_int_equal(cfg.rapid_rounds, 0);
    assert_int_equal(cfg.rapid_fails_needed, 7); /* irrelevant without rapid rounds */
    monitor_config_free(&cfg);
}

/* A tags map without a "" entry: untagged backends get no credentials. */
static void test_credentials_without_fallback(void **state)
{
    (void)state;
    struct monitor_config cfg;
    parse_ok(&cfg, "poll_lmtp: true\ntags:\n  gold: {user: g, password: x}\n");
    assert_non_null(monitor_config_credentials(&cfg, "gold"));
    assert_null(monitor_config_credentials(&cfg, ""));
    assert_null(monitor_config_credentials(&cfg, "silver"));
    monitor_config_free(&cfg);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("bogus: 1\n", "monitor.yaml:1: bogus: unknown key");
    expect_error("interval: 5\nbogus: 1\n", "monitor.yaml:2: bogus: unknown key");
    expect_error("- a\n", "monitor.yaml:1: expected a mapping, found a list");
    expect_error("director_addr: nowhere\n",
                 "monitor.yaml:1: director_addr: invalid address 'nowhere' (expected host:port)");
    expect_error("director_addr: 127.0.0.1:0\n",
                 "monitor.yaml:1: director_addr: invalid port in '127.0.0.1:0' (1 to 65535)");
    expect_error("poll_imap: maybe\n",
                 "monitor.yaml:1: poll_imap: expected true or false, found 'maybe'");
    expect_error("poll_imap: false\n",
                 "monitor.yaml:1: poll_imap: no protocol to probe: enable poll_imap, poll_pop3 "
                 "or poll_lmtp");
    expect_error("imap_port: 0\n", "monitor.yaml:1: imap_port: 0 is out of range [1, 65535]");
    expect_error("\npop3_port: 70000\n",
                 "monitor.yaml:2: pop3_port: 70000 is out of range [1, 65535]");
    expect_error("lmtp_port: \"24\"\n",
                 "monitor.yaml:1: lmtp_port: expected an integer, found '24'");
    expect_error("imap_tls: \"yes\"\n",
                 "monitor.yaml:1: imap_tls: expected true or false, found a quoted string");
    expect_error(
        "interval: 10x\n",
        "monitor.yaml:1: interval: expected a duration like 30s, 5m or 250ms, found '10x'");
    expect_error("interval: 5ms\n", "monitor.yaml:1: interval: duration out of range [10ms, "
                                    "86400000ms]");
    expect_error("timeout: 0\n", "monitor.yaml:1: timeout: duration out of range [10ms, 600000ms]");
    expect_error("retry_count: 0\n", "monitor.yaml:1: retry_count: 0 is out of range [1, 1000]");
    expect_error("rapid_rounds: -1\n",
                 "monitor.yaml:1: rapid_rounds: -1 is out of range [0, 1000]");
    expect_error("rapid_fails_needed: 0\n",
                 "monitor.yaml:1: rapid_fails_needed: 0 is out of range [1, 1000]");
    expect_error("rapid_rounds: 5\n",
                 "monitor.yaml:1: rapid_fails_needed: 7 exceeds rapid_rounds (5): no backend "
                 "could ever be flushed");
    expect_error("rapid_rounds: 5\nrapid_fails_needed: 6\n",
                 "monitor.yaml:2: rapid_fails_needed: 6 exceeds rapid_rounds (5): no backend "
                 "could ever be flushed");
    expect_error("restore_flushed: some\n",
                 "monitor.yaml:1: restore_flushed: expected any or own, found 'some'");
    expect_error("max_backends: 0\n",
                 "monitor.yaml:1: max_backends: 0 is out of range [1, 1000000]");
    expect_error("max_line_length: 100\n",
                 "monitor.yaml:1: max_line_length: 100 is out of range [512, 16777216]");
    expect_error("reconnect_min: 2s\nreconnect_max: 1s\n",
                 "monitor.yaml:2: reconnect_max: shorter than reconnect_min");
    expect_error("ping_interval: 10ms\n",
                 "monitor.yaml:1: ping_interval: duration out of range [100ms, 3600000ms]");
    expect_error("tags: [a]\n", "monitor.yaml:1: tags: expected a mapping, found a list");
    expect_error("tags:\n  gold: x\n",
                 "monitor.yaml:2: tags.gold: expected a mapping with user and password, found a "
                 "scalar");
    expect_error("tags:\n  gold:\n    user: u\n",
                 "monitor.yaml:3: tags.gold: password is required");
    expect_error("tags:\n  gold:\n    password: p\n",
                 "monitor.yaml:3: tags.gold: user is required");
    expect_error("tags:\n  gold:\n    user: u\n    password: p\n    realm: x\n",
                 "monitor.yaml:5: tags.gold.realm: unknown key");
    expect_error("tags:\n  gold:\n    user: u\n    password: \"a\\nb\"\n",
                 "monitor.yaml:4: tags.gold.password: must not contain CR or LF");
    expect_error("tags:\n  \"\":\n    user: \"a\\rb\"\n    password: p\n",
                 "monitor.yaml:3: tags..user: must not contain CR or LF");
    expect_error("tags:\n  \"a\\tb\": {user: u, password: p}\n",
                 "monitor.yaml:2: tags.a\tb: tag contains a control character");
}

/* Limits on what the file may hold: tag names, credential lengths, tag count. */
static void test_limits(void **state)
{
    (void)state;
    char *text = malloc(64 * 1024);
    char long_tag[300];
    memset(long_tag, 't', 256);
    long_tag[256] = '\0';
    snprintf(text, 64 * 1024, "tags:\n  %s: {user: u, password: p}\n", long_tag);
    char expect[512];
    snprintf(expect, sizeof(expect), "monitor.yaml:2: tags.%.255s: tag longer than 255 bytes",
             long_tag);
    expect_error(text, expect);

    char long_pw[1100];
    memset(long_pw, 'p', 1025);
    long_pw[1025] = '\0';
    snprintf(text, 64 * 1024, "tags:\n  gold:\n    user: u\n    password: %s\n", long_pw);
    expect_error(text, "monitor.yaml:4: tags.gold.password: longer than 1024 bytes");
    long_pw[1024] = '\0';
    snprintf(text, 64 * 1024, "tags:\n  gold:\n    user: u\n    password: %s\n", long_pw);
    struct monitor_config cfg;
    parse_ok(&cfg, text);
    monitor_config_free(&cfg);

    /* 1025 tags */
    size_t off = (size_t)snprintf(text, 64 * 1024, "tags:\n");
    for (int i = 0; i <= MONITOR_MAX_TAGS; i++)
        off += (size_t)snprintf(text + off, 64 * 1024 - off, "  t%d: {user: u, password: p}\n", i);
    expect_error(text, "monitor.yaml:2: tags: more than 1024 entries");
    free(text);
}

/* A failed read leaves the configuration as it was. */
static void test_failed_parse_keeps_config(void **state)
{
    (void)state;
    struct monitor_config cfg;
    parse_ok(&cfg, "interval: 20\n");
    struct petrel_error err = {0};
    const char *bad = "interval: 30\nbogus: 1\n";
    assert_false(monitor_config_parse(&cfg, "other.yaml", bad, strlen(bad), &err));
    assert_int_equal(cfg.interval_ms, 20000);
    assert_string_equal(cfg.file, "monitor.yaml");
    monitor_config_free(&cfg);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static struct ydoc *doc_of(const char *text)
{
    struct petrel_error err = {0};
    struct ydoc *doc = ydoc_parse("petrel.yaml", text, strlen(text), &err);
    if (doc == NULL)
        fail_msg("yaml: %s", err.message);
    return doc;
}

static void test_section_and_path(void **state)
{
    (void)state;
    char dir[] = "/tmp/petrel-monitor-config-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s/a.yaml", dir);
    snprintf(b, sizeof(b), "%s/b.yaml", dir);
    write_file(a, "interval: 2\n");
    write_file(b, "interval: 3\n");

    struct monitor_config cfg;
    monitor_config_defaults(&cfg);
    assert_string_equal(monitor_config_path(&cfg), "/etc/petrel/monitor.yaml");

    /* petrel.yaml's monitor section names the file. */
    struct petrel_error err = {0};
    struct cfg_ctx ctx = {.file = "petrel.yaml", .err = &err};
    char section[256];
    snprintf(section, sizeof(section), "monitor:\n  config_file: %s\n", a);
    struct ydoc *doc = doc_of(section);
    assert_true(monitor_section_read(&ctx, ynode_get(doc->root, "monitor"), &cfg));
    ydoc_free(doc);
    assert_string_equal(monitor_config_path(&cfg), a);

    /* MONITOR_CONFIG wins over config_file. */
    setenv(MONITOR_CONFIG_ENV, b, 1);
    assert_string_equal(monitor_config_path(&cfg), b);
    assert_true(monitor_config_load(&cfg, &err));
    assert_string_equal(cfg.file, b);
    assert_int_equal(cfg.interval_ms, 3000);
    assert_string_equal(cfg.config_file, a); /* kept */
    /* Idempotent once loaded. */
    unsetenv(MONITOR_CONFIG_ENV);
    assert_true(monitor_config_load(&cfg, &err));
    assert_int_equal(cfg.interval_ms, 3000);
    monitor_config_free(&cfg);

    /* An empty MONITOR_CONFIG is ignored. */
    monitor_config_defaults(&cfg);
    setenv(MONITOR_CONFIG_ENV, "", 1);
    cfg.config_file = strdup(a);
    assert_true(monitor_config_load(&cfg, &err));
    assert_int_equal(cfg.interval_ms, 2000);
    monitor_config_free(&cfg);
    unsetenv(MONITOR_CONFIG_ENV);

    /* A missing file and a bad one. */
    monitor_config_defaults(&cfg);
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/missing.yaml", dir);
    cfg.config_file = strdup(missing);
    assert_false(monitor_config_load(&cfg, &err));
    char expect[256];
    snprintf(expect, sizeof(expect), "%s: cannot open: No such file or directory", missing);
    assert_string_equal(err.message, expect);
    assert_null(cfg.file);
    write_file(missing, "timeout: 1\nretry_count: x\n");
    assert_false(monitor_config_load(&cfg, &err));
    snprintf(expect, sizeof(expect), "%s:2: retry_count: expected an integer, found 'x'", missing);
    assert_string_equal(err.message, expect);
    monitor_config_free(&cfg);

    /* Section errors. */
    monitor_config_defaults(&cfg);
    doc = doc_of("monitor:\n  interval: 5\n");
    assert_false(monitor_section_read(&ctx, ynode_get(doc->root, "monitor"), &cfg));
    assert_string_equal(err.message, "petrel.yaml:2: monitor.interval: unknown key");
    ydoc_free(doc);
    doc = doc_of("monitor: x\n");
    assert_false(monitor_section_read(&ctx, ynode_get(doc->root, "monitor"), &cfg));
    assert_string_equal(err.message, "petrel.yaml:1: monitor: expected a mapping, found a scalar");
    ydoc_free(doc);
    doc = doc_of("monitor:\n  config_file: \"\"\n");
    assert_true(monitor_section_read(&ctx, ynode_get(doc->root, "monitor"), &cfg));
    assert_null(cfg.config_file);
    ydoc_free(doc);
    monitor_config_free(&cfg);

    unlink(a);
    unlink(b);
    unlink(missing);
    rmdir(dir);
}

/* --check-config output: every key, the password never. */
static void test_print_hides_passwords(void **state)
{
    (void)state;
    struct monitor_config cfg;
    parse_ok(&cfg, "tags:\n  \"\": {user: probe, password: s3cr3t-pw}\n");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    monitor_config_print(&cfg, f);
    fclose(f);
    assert_null(strstr(text, "s3cr3t-pw"));
    assert_non_null(strstr(text, "password: \"(set)\""));
    assert_non_null(strstr(text, "user: \"probe\""));
    assert_non_null(strstr(text, "director_addr: \"127.0.0.1:9102\""));
    assert_non_null(strstr(text, "rapid_fails_needed: 7"));
    assert_non_null(strstr(text, "interval: 10000ms"));
    free(text);
    monitor_config_free(&cfg);

    /* Not loaded: only the section. */
    monitor_config_defaults(&cfg);
    f = open_memstream(&text, &len);
    monitor_config_print(&cfg, f);
    fclose(f);
    assert_non_null(strstr(text, "monitor file not read"));
    assert_null(strstr(text, "director_addr"));
    free(text);
    monitor_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clean_env),
        cmocka_unit_test_setup(test_every_key, clean_env),
        cmocka_unit_test_setup(test_tls_flags_and_ports, clean_env),
        cmocka_unit_test_setup(test_credentials_without_fallback, clean_env),
        cmocka_unit_test_setup(test_errors, clean_env),
        cmocka_unit_test_setup(test_limits, clean_env),
        cmocka_unit_test_setup(test_failed_parse_keeps_config, clean_env),
        cmocka_unit_test_setup(test_section_and_path, clean_env),
        cmocka_unit_test_setup(test_print_hides_passwords, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
