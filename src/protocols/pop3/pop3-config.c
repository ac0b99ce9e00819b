#include "protocols/pop3/pop3-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/cidr.h"
#include "net/sockaddr.h"
#include "protocols/pop3/pop3-uidl.h"

#include <stdlib.h>
#include <string.h>

#define POP3_MAX_LISTEN 16
#define POP3_MIN_IDLE_MS (10 * 60 * 1000) /* RFC 1939 section 3: at least 10 minutes */

void pop3_config_defaults(struct pop3_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = xcalloc(2, sizeof(char *));
    cfg->listen[0] = xstrdup(":110");
    cfg->listen_tls = xcalloc(1, sizeof(char *));
    cfg->auth_addr = xstrdup("127.0.0.1:10200");
    cfg->warden_addr = xstrdup("");
    cfg->disable_plaintext_auth = true;
    cfg->secure_nets = xcalloc(3, sizeof(char *));
    cfg->secure_nets[0] = xstrdup("127.0.0.0/8");
    cfg->secure_nets[1] = xstrdup("::1/128");
    cfg->max_line_length = 8192;
    cfg->max_connections = 10000;
    cfg->max_connections_per_user = 10;
    cfg->max_auth_failures = 3;
    cfg->login_timeout_ms = 60 * 1000;
    cfg->idle_timeout_ms = POP3_MIN_IDLE_MS;
    cfg->auth_timeout_ms = 30 * 1000;
    cfg->uidl_format = xstrdup(POP3_UIDL_DEFAULT_FORMAT);
    cfg->retr_sets_seen = true;
}

void pop3_config_free(struct pop3_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->listen_tls);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->auth_addr);
    free(cfg->warden_addr);
    cfg_strv_free(cfg->secure_nets);
    free(cfg->uidl_format);
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
            snprintf(path, sizeof(path), "pop3.%s", key);
            return cfg_fail(ctx, n, path, "%s", e.message);
        }
    }
    return true;
}

static bool check_nets(const struct cfg_ctx *ctx, const struct ynode *node, char **list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        struct cidr net;
        struct petrel_error e;
        if (!cidr_parse(list[i], &net, &e)) {
            const struct ynode *n = ynode_get(node, "secure_nets");
            if (n != NULL && n->type == YNODE_SEQ && i < n->count)
                n = n->items[i];
            return cfg_fail(ctx, n, "pop3.secure_nets", "%s", e.message);
        }
    }
    return true;
}

static bool check_uidl_format(const struct cfg_ctx *ctx, const struct ynode *node,
                              const char *format)
{
    struct petrel_error e;
    if (pop3_uidl_format_check(format, &e))
        return true;
    const struct ynode *n = ynode_get(node, "uidl_format");
    return cfg_fail(ctx, n != NULL ? n : node, "pop3.uidl_format", "%s", e.message);
}

bool pop3_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct pop3_config *cfg)
{
    static const char *const keys[] = {"listen",
                                       "listen_tls",
                                       "tls_cert_file",
                                       "tls_key_file",
                                       "auth_addr",
                                       "warden_addr",
                                       "disable_plaintext_auth",
                                       "secure_nets",
                                       "max_line_length",
                                       "max_connections",
                                       "max_connections_per_user",
                                       "max_auth_failures",
                                       "login_timeout",
                                       "idle_timeout",
                                       "auth_timeout",
                                       "uidl_format",
                                       "retr_sets_seen",
                                       NULL};
    const char *p = "pop3";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_string_list(ctx, node, p, "listen", POP3_MAX_LISTEN, &cfg->listen, NULL) ||
        !check_addresses(ctx, node, "listen", cfg->listen) ||
        !cfg_string_list(ctx, node, p, "listen_tls", POP3_MAX_LISTEN, &cfg->listen_tls, NULL) ||
        !check_addresses(ctx, node, "listen_tls", cfg->listen_tls) ||
        !cfg_string(ctx, node, p, "tls_cert_file", &cfg->tls_cert_file) ||
        !cfg_string(ctx, node, p, "tls_key_file", &cfg->tls_key_file) ||
        !cfg_string(ctx, node, p, "auth_addr", &cfg->auth_addr) ||
        !cfg_string(ctx, node, p, "warden_addr", &cfg->warden_addr) ||
        !cfg_bool(ctx, node, p, "disable_plaintext_auth", &cfg->disable_plaintext_auth) ||
        !cfg_string_list(ctx, node, p, "secure_nets", 256, &cfg->secure_nets, NULL) ||
        !check_nets(ctx, node, cfg->secure_nets) ||
        !cfg_int(ctx, node, p, "max_line_length", 1024, 1024 * 1024, &cfg->max_line_length) ||
        !cfg_int(ctx, node, p, "max_connections", 1, 10000000, &cfg->max_connections) ||
        !cfg_int(ctx, node, p, "max_connections_per_user", 0, 100000,
                 &cfg->max_connections_per_user) ||
        !cfg_int(ctx, node, p, "max_auth_failures", 1, 100, &cfg->max_auth_failures) ||
        !cfg_duration_ms(ctx, node, p, "login_timeout", 1000, 3600000, &cfg->login_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "idle_timeout", POP3_MIN_IDLE_MS, 86400000,
                         &cfg->idle_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &cfg->auth_timeout_ms) ||
        !cfg_string(ctx, node, p, "uidl_format", &cfg->uidl_format) ||
        !check_uidl_format(ctx, node, cfg->uidl_format) ||
        !cfg_bool(ctx, node, p, "retr_sets_seen", &cfg->retr_sets_seen))
        return false;
    bool has_cert = cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0';
    bool has_key = cfg->tls_key_file != NULL && *cfg->tls_key_file != '\0';
    if (has_cert != has_key)
        return cfg_fail(ctx, node, p, "tls_cert_file and tls_key_file go together");
    if (cfg->warden_addr != NULL && *cfg->warden_addr != '\0') {
        struct petrel_error e;
        struct net_addr addr;
        if (!net_addr_parse(cfg->warden_addr, &addr, &e))
            return cfg_fail(ctx, ynode_get(node, "warden_addr"), "pop3.warden_addr", "%s",
                            e.message);
    }
    if (!required)
        return true;
    bool any_tls = cfg->listen_tls != NULL && cfg->listen_tls[0] != NULL;
    bool any_plain = cfg->listen != NULL && cfg->listen[0] != NULL;
    if (!any_tls && !any_plain)
        return cfg_fail(ctx, node, p, "needs listen or listen_tls");
    if (any_tls && !has_cert)
        return cfg_fail(ctx, ynode_get(node, "listen_tls"), "pop3.listen_tls",
                        "needs tls_cert_file and tls_key_file");
    if (cfg->auth_addr == NULL || *cfg->auth_addr == '\0')
        return cfg_fail(ctx, node, p, "auth_addr is required (the auth service)");
    return true;
}

void pop3_config_print(const struct pop3_config *cfg, FILE *out)
{
    fputs("pop3:\n", out);
    yaml_put_list(out, "  ", "listen", cfg->listen);
    yaml_put_list(out, "  ", "listen_tls", cfg->listen_tls);
    yaml_put_kv(out, "  ", "tls_cert_file", cfg->tls_cert_file != NULL ? cfg->tls_cert_file : "");
    yaml_put_kv(out, "  ", "tls_key_file", cfg->tls_key_file != NULL ? cfg->tls_key_file : "");
    yaml_put_kv(out, "  ", "auth_addr", cfg->auth_addr);
    yaml_put_kv(out, "  ", "warden_addr", cfg->warden_addr != NULL ? cfg->warden_addr : "");
    yaml_put_list(out, "  ", "secure_nets", cfg->secure_nets);
    fprintf(out,
            "  disable_plaintext_auth: %s\n  max_line_length: %lld\n  max_connections: %lld\n"
            "  max_connections_per_user: %lld\n  max_auth_failures: %lld\n"
            "  login_timeout: %lldms\n  idle_timeout: %lldms\n  auth_timeout: %lldms\n",
            cfg->disable_plaintext_auth ? "true" : "false", (long long)cfg->max_line_length,
            (long long)cfg->max_connections, (long long)cfg->max_connections_per_user,
            (long long)cfg->max_auth_failures, (long long)cfg->login_timeout_ms,
            (long long)cfg->idle_timeout_ms, (long long)cfg->auth_timeout_ms);
    yaml_put_kv(out, "  ", "uidl_format", cfg->uidl_format);
    fprintf(out, "  retr_sets_seen: %s\n", cfg->retr_sets_seen ? "true" : "false");
}
