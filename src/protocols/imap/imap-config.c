#include "protocols/imap/imap-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/sockaddr.h"

#include <stdlib.h>
#include <string.h>

#define IMAP_MAX_LISTEN 16

void imap_config_defaults(struct imap_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = xcalloc(2, sizeof(char *));
    cfg->listen[0] = xstrdup(":143");
    cfg->listen_tls = xcalloc(1, sizeof(char *));
    cfg->auth_addr = xstrdup("127.0.0.1:10200");
    cfg->warden_addr = xstrdup("");
    cfg->disable_plaintext_auth = true;
    cfg->max_line_length = 64 * 1024;
    cfg->max_literal_size = 64 * 1024 * 1024;
    cfg->max_connections = 10000;
    cfg->max_connections_per_user = 20;
    cfg->login_timeout_ms = 60 * 1000;
    cfg->idle_timeout_ms = 30 * 60 * 1000;
    cfg->auth_timeout_ms = 30 * 1000;
}

void imap_config_free(struct imap_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->listen_tls);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->auth_addr);
    free(cfg->warden_addr);
    memset(cfg, 0, sizeof(*cfg));
}

static bool check_addresses(const struct cfg_ctx *ctx, const struct ynode *node, const char *key,
                            char **list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        struct petrel_error e;
        struct net_addr addr;
        if (!net_addr_parse(list[i], &addr, &e)) {
            const struct ynode *n = ynode_get(node, key);
            if (n != NULL && n->type == YNODE_SEQ && i < n->count)
                n = n->items[i];
            char path[64];
            snprintf(path, sizeof(path), "imap.%s", key);
            return cfg_fail(ctx, n, path, "%s", e.message);
        }
    }
    return true;
}

/* "" (no warden) or an address with a port. */
static bool check_warden_addr(const struct cfg_ctx *ctx, const struct ynode *node, const char *addr)
{
    if (addr == NULL || *addr == '\0')
        return true;
    char *list[] = {(char *)addr, NULL};
    return check_addresses(ctx, node, "warden_addr", list);
}

bool imap_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct imap_config *cfg)
{
    static const char *const keys[] = {"listen",
                                       "listen_tls",
                                       "tls_cert_file",
                                       "tls_key_file",
                                       "auth_addr",
                                       "disable_plaintext_auth",
                                       "max_line_length",
                                       "max_literal_size",
                                       "max_connections",
                                       "max_connections_per_user",
                                       "login_timeout",
                                       "idle_timeout",
                                       "auth_timeout",
                                       "warden_addr",
                                       NULL};
    const char *p = "imap";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_string_list(ctx, node, p, "listen", IMAP_MAX_LISTEN, &cfg->listen, NULL) ||
        !check_addresses(ctx, node, "listen", cfg->listen) ||
        !cfg_string_list(ctx, node, p, "listen_tls", IMAP_MAX_LISTEN, &cfg->listen_tls, NULL) ||
        !check_addresses(ctx, node, "listen_tls", cfg->listen_tls) ||
        !cfg_string(ctx, node, p, "tls_cert_file", &cfg->tls_cert_file) ||
        !cfg_string(ctx, node, p, "tls_key_file", &cfg->tls_key_file) ||
        !cfg_string(ctx, node, p, "auth_addr", &cfg->auth_addr) ||
        !cfg_string(ctx, node, p, "warden_addr", &cfg->warden_addr) ||
        !check_warden_addr(ctx, node, cfg->warden_addr) ||
        !cfg_bool(ctx, node, p, "disable_plaintext_auth", &cfg->disable_plaintext_auth) ||
        !cfg_int(ctx, node, p, "max_line_length", 1024, 16 * 1024 * 1024, &cfg->max_line_length) ||
        !cfg_int(ctx, node, p, "max_literal_size", 1024, (int64_t)4 << 30,
                 &cfg->max_literal_size) ||
        !cfg_int(ctx, node, p, "max_connections", 1, 10000000, &cfg->max_connections) ||
        !cfg_int(ctx, node, p, "max_connections_per_user", 0, 100000,
                 &cfg->max_connections_per_user) ||
        !cfg_duration_ms(ctx, node, p, "login_timeout", 1000, 3600000, &cfg->login_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "idle_timeout", 1000, 86400000, &cfg->idle_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &cfg->auth_timeout_ms))
        return false;
    bool has_cert = cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0';
    bool has_key = cfg->tls_key_file != NULL && *cfg->tls_key_file != '\0';
    if (has_cert != has_key)
        return cfg_fail(ctx, node, p, "tls_cert_file and tls_key_file go together");
    if (!required)
        return true;
    bool any_tls = cfg->listen_tls != NULL && cfg->listen_tls[0] != NULL;
    bool any_plain = cfg->listen != NULL && cfg->listen[0] != NULL;
    if (!any_tls && !any_plain)
        return cfg_fail(ctx, node, p, "needs listen or listen_tls");
    if (any_tls && !has_cert)
        return cfg_fail(ctx, ynode_get(node, "listen_tls"), "imap.listen_tls",
                        "needs tls_cert_file and tls_key_file");
    if (cfg->auth_addr == NULL || *cfg->auth_addr == '\0')
        return cfg_fail(ctx, node, p, "auth_addr is required (the auth service)");
    return true;
}

void imap_config_print(const struct imap_config *cfg, FILE *out)
{
    fputs("imap:\n", out);
    yaml_put_list(out, "  ", "listen", cfg->listen);
    yaml_put_list(out, "  ", "listen_tls", cfg->listen_tls);
    yaml_put_kv(out, "  ", "tls_cert_file", cfg->tls_cert_file != NULL ? cfg->tls_cert_file : "");
    yaml_put_kv(out, "  ", "tls_key_file", cfg->tls_key_file != NULL ? cfg->tls_key_file : "");
    yaml_put_kv(out, "  ", "auth_addr", cfg->auth_addr);
    yaml_put_kv(out, "  ", "warden_addr", cfg->warden_addr);
    fprintf(out,
            "  disable_plaintext_auth: %s\n  max_line_length: %lld\n  max_literal_size: %lld\n"
            "  max_connections: %lld\n  max_connections_per_user: %lld\n"
            "  login_timeout: %lldms\n  idle_timeout: %lldms\n  auth_timeout: %lldms\n",
            cfg->disable_plaintext_auth ? "true" : "false", (long long)cfg->max_line_length,
            (long long)cfg->max_literal_size, (long long)cfg->max_connections,
            (long long)cfg->max_connections_per_user, (long long)cfg->login_timeout_ms,
            (long long)cfg->idle_timeout_ms, (long long)cfg->auth_timeout_ms);
}
