/* The configuration keys the mail protocol servers share. */
#include "protocols/common/mail-login-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"
#include "net/sockaddr.h"

#include <stdlib.h>
#include <string.h>

#define MAIL_LOGIN_MAX_LISTEN 16

void mail_login_config_defaults(struct mail_login_config *cfg, const struct mail_login_section *sec)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = xcalloc(2, sizeof(char *));
    cfg->listen[0] = xstrdup(sec->listen);
    cfg->listen_tls = xcalloc(1, sizeof(char *));
    cfg->auth_addr = xstrdup("127.0.0.1:10200");
    cfg->warden_addr = xstrdup("");
    cfg->disable_plaintext_auth = true;
    cfg->max_connections = 10000;
    cfg->max_connections_per_user = sec->max_connections_per_user;
    cfg->max_connections_per_ip = 100;
    /* Webmail on the same host brings every user from loopback. */
    cfg->per_ip_limit_exempt_nets = xcalloc(3, sizeof(char *));
    cfg->per_ip_limit_exempt_nets[0] = xstrdup("127.0.0.0/8");
    cfg->per_ip_limit_exempt_nets[1] = xstrdup("::1/128");
    cfg->login_trusted_networks = xcalloc(1, sizeof(char *));
    cfg->login_timeout_ms = 60 * 1000;
    cfg->idle_timeout_ms = sec->idle_timeout_ms;
    cfg->auth_timeout_ms = 30 * 1000;
}

void mail_login_config_free(struct mail_login_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->listen_tls);
    cfg_strv_free(cfg->per_ip_limit_exempt_nets);
    cfg_strv_free(cfg->login_trusted_networks);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->auth_addr);
    free(cfg->warden_addr);
    memset(cfg, 0, sizeof(*cfg));
}

/* Every entry of `list` (the value of `key`) is an address; the error
 * points at the offending list item. */
static bool check_addresses(const struct cfg_ctx *ctx, const struct ynode *node,
                            const struct mail_login_section *sec, const char *key, char **list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        struct petrel_error e;
        struct net_addr addr;
        if (!net_addr_parse(list[i], &addr, &e)) {
            const struct ynode *n = ynode_get(node, key);
            if (n != NULL && n->type == YNODE_SEQ && i < n->count)
                n = n->items[i];
            char path[64];
            snprintf(path, sizeof(path), "%s.%s", sec->name, key);
            return cfg_fail(ctx, n, path, "%s", e.message);
        }
    }
    return true;
}

/* "" (no warden) or an address with a port. */
static bool check_warden_addr(const struct cfg_ctx *ctx, const struct ynode *node,
                              const struct mail_login_section *sec, const char *addr)
{
    return listen_config_check_target(ctx, node, sec->name, "warden_addr", addr,
                                      NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK);
}

bool mail_login_config_read_endpoints(const struct cfg_ctx *ctx, const struct ynode *node,
                                      const struct mail_login_section *sec,
                                      struct mail_login_config *cfg)
{
    const char *p = sec->name;
    return cfg_string_list(ctx, node, p, "listen", MAIL_LOGIN_MAX_LISTEN, &cfg->listen, NULL) &&
           check_addresses(ctx, node, sec, "listen", cfg->listen) &&
           cfg_string_list(ctx, node, p, "listen_tls", MAIL_LOGIN_MAX_LISTEN, &cfg->listen_tls,
                           NULL) &&
           check_addresses(ctx, node, sec, "listen_tls", cfg->listen_tls) &&
           cfg_string(ctx, node, p, "tls_cert_file", &cfg->tls_cert_file) &&
           cfg_string(ctx, node, p, "tls_key_file", &cfg->tls_key_file) &&
           cfg_string(ctx, node, p, "auth_addr", &cfg->auth_addr) &&
           listen_config_check_target(ctx, node, p, "auth_addr", cfg->auth_addr,
                                      NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK) &&
           cfg_string(ctx, node, p, "warden_addr", &cfg->warden_addr) &&
           check_warden_addr(ctx, node, sec, cfg->warden_addr) &&
           cfg_bool(ctx, node, p, "disable_plaintext_auth", &cfg->disable_plaintext_auth);
}

bool mail_login_config_read_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                   const struct mail_login_section *sec,
                                   struct mail_login_config *cfg)
{
    const char *p = sec->name;
    return cfg_int(ctx, node, p, "max_connections", 1, 10000000, &cfg->max_connections) &&
           cfg_int(ctx, node, p, "max_connections_per_user", 0, 100000,
                   &cfg->max_connections_per_user) &&
           cfg_int(ctx, node, p, "max_connections_per_ip", 0, 10000000,
                   &cfg->max_connections_per_ip) &&
           listen_config_read_nets_key(ctx, node, p, "per_ip_limit_exempt_nets",
                                       &cfg->per_ip_limit_exempt_nets) &&
           listen_config_read_nets_key(ctx, node, p, "login_trusted_networks",
                                       &cfg->login_trusted_networks);
}

bool mail_login_config_read_timeouts(const struct cfg_ctx *ctx, const struct ynode *node,
                                     const struct mail_login_section *sec,
                                     struct mail_login_config *cfg)
{
    const char *p = sec->name;
    return cfg_duration_ms(ctx, node, p, "login_timeout", 1000, 3600000, &cfg->login_timeout_ms) &&
           cfg_duration_ms(ctx, node, p, "idle_timeout", sec->min_idle_timeout_ms, 86400000,
                           &cfg->idle_timeout_ms) &&
           cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &cfg->auth_timeout_ms);
}

bool mail_login_config_check(const struct cfg_ctx *ctx, const struct ynode *node,
                             const struct mail_login_section *sec, bool required,
                             const struct mail_login_config *cfg)
{
    const char *p = sec->name;
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
    if (any_tls && !has_cert) {
        char path[64];
        snprintf(path, sizeof(path), "%s.listen_tls", p);
        return cfg_fail(ctx, ynode_get(node, "listen_tls"), path,
                        "needs tls_cert_file and tls_key_file");
    }
    if (cfg->auth_addr == NULL || *cfg->auth_addr == '\0')
        return cfg_fail(ctx, node, p, "auth_addr is required (the auth service)");
    return true;
}

void mail_login_config_print_endpoints(const struct mail_login_config *cfg, FILE *out)
{
    yaml_put_list(out, "  ", "listen", cfg->listen);
    yaml_put_list(out, "  ", "listen_tls", cfg->listen_tls);
    yaml_put_kv(out, "  ", "tls_cert_file", cfg->tls_cert_file != NULL ? cfg->tls_cert_file : "");
    yaml_put_kv(out, "  ", "tls_key_file", cfg->tls_key_file != NULL ? cfg->tls_key_file : "");
    yaml_put_kv(out, "  ", "auth_addr", cfg->auth_addr);
    yaml_put_kv(out, "  ", "warden_addr", cfg->warden_addr != NULL ? cfg->warden_addr : "");
}

void mail_login_config_print_limits(const struct mail_login_config *cfg, FILE *out)
{
    fprintf(out,
            "  max_connections: %lld\n  max_connections_per_user: %lld\n"
            "  max_connections_per_ip: %lld\n",
            (long long)cfg->max_connections, (long long)cfg->max_connections_per_user,
            (long long)cfg->max_connections_per_ip);
    yaml_put_list(out, "  ", "per_ip_limit_exempt_nets", cfg->per_ip_limit_exempt_nets);
    yaml_put_list(out, "  ", "login_trusted_networks", cfg->login_trusted_networks);
}

void mail_login_config_print_timeouts(const struct mail_login_config *cfg, FILE *out)
{
    fprintf(out, "  login_timeout: %lldms\n  idle_timeout: %lldms\n  auth_timeout: %lldms\n",
            (long long)cfg->login_timeout_ms, (long long)cfg->idle_timeout_ms,
            (long long)cfg->auth_timeout_ms);
}
