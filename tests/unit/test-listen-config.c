/* Unit tests for net/listen-config.h's section pieces that several
 * sections share: the line-service listener keys (auth, warden_service,
 * quota.quota_status) and the operator HTTP API limits (backend_api,
 * director.api). Reading keeps what is absent, errors read
 * `file:line: section.key: message`, printing gives the --check-config
 * lines. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/cfg-read.h"
#include "core/yaml-doc.h"
#include "net/listen-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A section struct naming its fields as LISTEN_CONFIG_SERVER_OF expects. */
struct server_section {
    char **listen;
    char **allowed_nets;
    int64_t socket_mode;
    int64_t max_connections;
    int64_t max_connections_per_ip;
    int64_t handshake_timeout_ms;
};

static struct {
    struct ydoc *doc;
    struct petrel_error err;
    struct cfg_ctx ctx;
    struct server_section s;
} fx;

static const struct ynode *load(const char *text)
{
    ydoc_free(fx.doc);
    memset(&fx.err, 0, sizeof(fx.err));
    fx.doc = ydoc_parse("c.yaml", text, strlen(text), &fx.err);
    if (fx.doc == NULL)
        fail_msg("YAML: %s", fx.err.message);
    fx.ctx.file = "c.yaml";
    fx.ctx.err = &fx.err;
    return ynode_get(fx.doc->root, "svc");
}

static int setup(void **state)
{
    (void)state;
    static const char *const listen[] = {"127.0.0.1:1", NULL};
    static const char *const nets[] = {"127.0.0.0/8", NULL};
    fx.s.listen = cfg_strv_dup(listen);
    fx.s.allowed_nets = cfg_strv_dup(nets);
    fx.s.socket_mode = 0660;
    fx.s.max_connections = 1024;
    fx.s.max_connections_per_ip = 128;
    fx.s.handshake_timeout_ms = 10000;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ydoc_free(fx.doc);
    fx.doc = NULL;
    cfg_strv_free(fx.s.listen);
    cfg_strv_free(fx.s.allowed_nets);
    memset(&fx.s, 0, sizeof(fx.s));
    return 0;
}

/* Reads `text` into fresh defaults (a failed read leaves a half-read
 * section behind, as the caller then stops). */
static bool read_server(const char *text, size_t *count)
{
    teardown(NULL);
    setup(NULL);
    const struct listen_config_server server = LISTEN_CONFIG_SERVER_OF(&fx.s);
    return listen_config_read_server(&fx.ctx, load(text), "svc", 4, &server, count);
}

static char *printed_server(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    listen_config_print_server(out, "  ", fx.s.listen, fx.s.allowed_nets, fx.s.socket_mode,
                               fx.s.max_connections, fx.s.max_connections_per_ip,
                               fx.s.handshake_timeout_ms);
    fclose(out);
    return text;
}

static void test_server_keys_absent_keep_defaults(void **state)
{
    (void)state;
    size_t count = 99;
    assert_true(read_server("svc: {}\n", &count));
    assert_int_equal(count, 1);
    char *text = printed_server();
    assert_string_equal(text, "  listen:\n    - \"127.0.0.1:1\"\n"
                              "  allowed_nets:\n    - \"127.0.0.0/8\"\n"
                              "  socket_mode: \"0660\"\n"
                              "  max_connections: 1024\n  max_connections_per_ip: 128\n"
                              "  handshake_timeout: 10000ms\n");
    free(text);
}

static void test_server_keys_read_and_printed(void **state)
{
    (void)state;
    size_t count = 0;
    assert_true(read_server("svc:\n  listen: [\"127.0.0.1:7\", \"unix:/tmp/s\"]\n"
                            "  allowed_nets: [10.0.0.0/8]\n  socket_mode: \"0600\"\n"
                            "  max_connections: 77\n  max_connections_per_ip: 0\n"
                            "  handshake_timeout: 3s\n",
                            &count));
    assert_int_equal(count, 2);
    char *text = printed_server();
    assert_string_equal(text, "  listen:\n    - \"127.0.0.1:7\"\n    - \"unix:/tmp/s\"\n"
                              "  allowed_nets:\n    - \"10.0.0.0/8\"\n"
                              "  socket_mode: \"0600\"\n"
                              "  max_connections: 77\n  max_connections_per_ip: 0\n"
                              "  handshake_timeout: 3000ms\n");
    free(text);
}

static void test_server_empty_listen_counts_zero(void **state)
{
    (void)state;
    size_t count = 99;
    assert_true(read_server("svc:\n  listen: []\n", &count));
    assert_int_equal(count, 0);
}

static void test_server_errors_name_the_key_and_line(void **state)
{
    (void)state;
    size_t count = 0;
    assert_false(read_server("svc:\n  listen: [nohost]\n", &count));
    assert_string_equal(fx.err.message,
                        "c.yaml:2: svc.listen: invalid address 'nohost' (expected host:port)");
    assert_false(
        read_server("svc:\n  allowed_nets: [10.0.0.0/8]\n  socket_mode: \"999\"\n", &count));
    assert_string_equal(fx.err.message,
                        "c.yaml:3: svc.socket_mode: expected an octal mode such as \"0660\"");
    assert_false(read_server("svc:\n  max_connections: 0\n", &count));
    assert_string_equal(fx.err.message,
                        "c.yaml:2: svc.max_connections: 0 is out of range [1, 1000000]");
    assert_false(read_server("svc:\n  handshake_timeout: 2h\n", &count));
    assert_string_equal(fx.err.message,
                        "c.yaml:2: svc.handshake_timeout: duration out of range [0ms, 3600000ms]");
    assert_false(read_server("svc:\n  listen: [\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\", "
                             "\"127.0.0.1:4\", \"127.0.0.1:5\"]\n",
                             &count));
    assert_string_equal(fx.err.message, "c.yaml:2: svc.listen: more than 4 items");
}

static void test_api_limits_read_and_printed(void **state)
{
    (void)state;
    int64_t body = 1024 * 1024;
    int64_t conns = 4096;
    int64_t per_ip = 128;
    assert_true(listen_config_read_api_limits(&fx.ctx, load("svc: {}\n"), "svc", 2048, &body,
                                              &conns, &per_ip));
    assert_int_equal(body, 1024 * 1024);
    assert_int_equal(conns, 4096);
    assert_int_equal(per_ip, 128);
    assert_true(listen_config_read_api_limits(
        &fx.ctx,
        load("svc:\n  max_body_bytes: 2000\n  max_connections: 5\n  max_connections_per_ip: 0\n"),
        "svc", 2048, &body, &conns, &per_ip));
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    listen_config_print_api_limits(out, "    ", body, conns, per_ip, true);
    fclose(out);
    assert_string_equal(text, "    max_body_bytes: 2000\n    max_connections: 5\n"
                              "    max_connections_per_ip: 0\n"
                              "    allow_unauthenticated_remote: true\n");
    free(text);
    assert_false(listen_config_read_api_limits(&fx.ctx, load("svc:\n  max_body_bytes: 4096\n"),
                                               "svc", 2048, &body, &conns, &per_ip));
    assert_string_equal(fx.err.message,
                        "c.yaml:2: svc.max_body_bytes: 4096 is out of range [1024, 2048]");
    assert_int_equal(body, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_server_keys_absent_keep_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_keys_read_and_printed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_empty_listen_counts_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_errors_name_the_key_and_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_api_limits_read_and_printed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
