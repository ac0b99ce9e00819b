/* The `lmtp:` configuration section: defaults, reading, printing. */
#include "protocols/lmtp/lmtp-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"

#include <stdlib.h>
#include <string.h>

#define LMTP_MAX_LISTEN 16

void lmtp_config_defaults(struct lmtp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    /* LMTP has no authentication: loopback only unless configured. */
    cfg->listen = xcalloc(2, sizeof(char *));
    cfg->listen[0] = xstrdup("127.0.0.1:24");
    /* Postfix's own LMTP/pipe sockets live in its private/ directory; ours
     * gets the group's permission at most, and TCP clients from loopback. */
    cfg->allowed_nets = xcalloc(3, sizeof(char *));
    cfg->allowed_nets[0] = xstrdup("127.0.0.0/8");
    cfg->allowed_nets[1] = xstrdup("::1/128");
    cfg->socket_mode = 0660;
    cfg->auth_addr = xstrdup("127.0.0.1:10200");
    cfg->hostname = xstrdup("");
    cfg->recipient_delimiter = xstrdup("+");
    cfg->username_format = xstrdup("%u");
    cfg->add_received_header = true;
    cfg->max_message_size = 64 * 1024 * 1024;
    cfg->max_recipients = 100;
    cfg->max_line_length = 4096;
    cfg->max_connections = 1000;
    cfg->max_errors = 20;
    cfg->command_timeout_ms = 5 * 60 * 1000;
    cfg->auth_timeout_ms = 30 * 1000;
    cfg->delivery_threads = 8;
    cfg->delivery_queue = 1024;
    /* On disk (a tmpfs /tmp would hold the spooled bytes in memory again). */
    cfg->temp_dir = xstrdup("/var/tmp");
    cfg->login_trusted_networks = xcalloc(1, sizeof(char *));
    cfg->folder_cache_bytes = 32 * 1024 * 1024;
    cfg->folder_cache_idle_ms = 30 * 1000;
}

void lmtp_config_free(struct lmtp_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->allowed_nets);
    cfg_strv_free(cfg->login_trusted_networks);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->auth_addr);
    free(cfg->hostname);
    free(cfg->recipient_delimiter);
    free(cfg->username_format);
    free(cfg->temp_dir);
    memset(cfg, 0, sizeof(*cfg));
}

bool lmtp_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct lmtp_config *cfg)
{
    static const char *const keys[] = {LMTP_CONFIG_SHARED_KEYS,
                                       "add_received_header",
                                       "delivery_threads",
                                       "delivery_queue",
                                       "folder_cache_bytes",
                                       "folder_cache_idle",
                                       NULL};
    const char *p = "lmtp";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys) ||
        !lmtp_config_read_values(ctx, node, p, cfg))
        return false;
    return !required || lmtp_config_check_required(ctx, node, p, cfg);
}

bool lmtp_config_check_required(const struct cfg_ctx *ctx, const struct ynode *node,
                                const char *path, const struct lmtp_config *cfg)
{
    if (cfg->listen == NULL || cfg->listen[0] == NULL)
        return cfg_fail(ctx, node, path, "needs at least one listen address");
    if (cfg->auth_addr == NULL || *cfg->auth_addr == '\0')
        return cfg_fail(ctx, node, path, "auth_addr is required (the auth service)");
    return true;
}

bool lmtp_config_read_values(const struct cfg_ctx *ctx, const struct ynode *node, const char *p,
                             struct lmtp_config *cfg)
{
    char key[96];
    size_t listen_count = 0;
    if (!listen_config_read_addresses(ctx, node, p, LMTP_MAX_LISTEN, &cfg->listen, &listen_count) ||
        !listen_config_read_nets(ctx, node, p, &cfg->allowed_nets) ||
        !listen_config_read_socket_mode(ctx, node, p, &cfg->socket_mode) ||
        !listen_config_read_nets_key(ctx, node, p, "login_trusted_networks",
                                     &cfg->login_trusted_networks) ||
        !cfg_string(ctx, node, p, "tls_cert_file", &cfg->tls_cert_file) ||
        !cfg_string(ctx, node, p, "tls_key_file", &cfg->tls_key_file) ||
        !cfg_string(ctx, node, p, "auth_addr", &cfg->auth_addr) ||
        !listen_config_check_target(ctx, node, p, "auth_addr", cfg->auth_addr,
                                    NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK) ||
        !cfg_string(ctx, node, p, "hostname", &cfg->hostname) ||
        !cfg_string(ctx, node, p, "recipient_delimiter", &cfg->recipient_delimiter) ||
        !cfg_check_recipient_delimiter(ctx, node, p, cfg->recipient_delimiter) ||
        !cfg_string(ctx, node, p, "username_format", &cfg->username_format) ||
        !cfg_check_username_format(ctx, node, p, cfg->username_format) ||
        !cfg_bool(ctx, node, p, "add_received_header", &cfg->add_received_header) ||
        !cfg_int(ctx, node, p, "max_message_size", 1024, (int64_t)4 << 30,
                 &cfg->max_message_size) ||
        !cfg_int(ctx, node, p, "max_recipients", 1, 100000, &cfg->max_recipients) ||
        !cfg_int(ctx, node, p, "max_line_length", 512, 1024 * 1024, &cfg->max_line_length) ||
        !cfg_int(ctx, node, p, "max_connections", 1, 1000000, &cfg->max_connections) ||
        !cfg_int(ctx, node, p, "max_connections_per_ip", 0, 1000000,
                 &cfg->max_connections_per_ip) ||
        !cfg_int(ctx, node, p, "max_errors", 1, 100000, &cfg->max_errors) ||
        !cfg_duration_ms(ctx, node, p, "command_timeout", 1000, 86400000,
                         &cfg->command_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &cfg->auth_timeout_ms) ||
        !cfg_int(ctx, node, p, "delivery_threads", 1, 64, &cfg->delivery_threads) ||
        !cfg_int(ctx, node, p, "delivery_queue", 1, 1000000, &cfg->delivery_queue) ||
        !cfg_int(ctx, node, p, "folder_cache_bytes", 0, (int64_t)64 << 30,
                 &cfg->folder_cache_bytes) ||
        !cfg_duration_ms(ctx, node, p, "folder_cache_idle", 100, 86400000,
                         &cfg->folder_cache_idle_ms))
        return false;
    if (!cfg_string(ctx, node, p, "temp_dir", &cfg->temp_dir))
        return false;
    snprintf(key, sizeof(key), "%s.temp_dir", p);
    if (cfg->temp_dir[0] != '/')
        return cfg_fail(ctx, ynode_get(node, "temp_dir"), key, "an absolute directory path");
    snprintf(key, sizeof(key), "%s.hostname", p);
    if (strlen(cfg->hostname) > 255 || strpbrk(cfg->hostname, " \t\r\n") != NULL)
        return cfg_fail(ctx, ynode_get(node, "hostname"), key,
                        "a host name without spaces, at most 255 characters");
    bool has_cert = cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0';
    bool has_key = cfg->tls_key_file != NULL && *cfg->tls_key_file != '\0';
    if (has_cert != has_key)
        return cfg_fail(ctx, node, p, "tls_cert_file and tls_key_file go together");
    return true;
}

void lmtp_config_print_shared_head(const struct lmtp_config *cfg, FILE *out, const char *in)
{
    listen_config_print(out, in, cfg->listen, cfg->allowed_nets, cfg->socket_mode);
    yaml_put_list(out, in, "login_trusted_networks", cfg->login_trusted_networks);
    yaml_put_kv(out, in, "tls_cert_file", cfg->tls_cert_file != NULL ? cfg->tls_cert_file : "");
    yaml_put_kv(out, in, "tls_key_file", cfg->tls_key_file != NULL ? cfg->tls_key_file : "");
    yaml_put_kv(out, in, "auth_addr", cfg->auth_addr);
    yaml_put_kv(out, in, "hostname", cfg->hostname);
    yaml_put_kv(out, in, "recipient_delimiter", cfg->recipient_delimiter);
    yaml_put_kv(out, in, "username_format", cfg->username_format);
}

void lmtp_config_print(const struct lmtp_config *cfg, FILE *out)
{
    fputs("lmtp:\n", out);
    lmtp_config_print_shared_head(cfg, out, "  ");
    fprintf(out,
            "  add_received_header: %s\n  max_message_size: %lld\n  max_recipients: %lld\n"
            "  max_line_length: %lld\n  max_connections: %lld\n  max_errors: %lld\n"
            "  command_timeout: %lldms\n  auth_timeout: %lldms\n  delivery_threads: %lld\n"
            "  delivery_queue: %lld\n",
            cfg->add_received_header ? "true" : "false", (long long)cfg->max_message_size,
            (long long)cfg->max_recipients, (long long)cfg->max_line_length,
            (long long)cfg->max_connections, (long long)cfg->max_errors,
            (long long)cfg->command_timeout_ms, (long long)cfg->auth_timeout_ms,
            (long long)cfg->delivery_threads, (long long)cfg->delivery_queue);
    fprintf(out, "  max_connections_per_ip: %lld\n", (long long)cfg->max_connections_per_ip);
    yaml_put_kv(out, "  ", "temp_dir", cfg->temp_dir);
    fprintf(out, "  folder_cache_bytes: %lld\n  folder_cache_idle: %lldms\n",
            (long long)cfg->folder_cache_bytes, (long long)cfg->folder_cache_idle_ms);
}
