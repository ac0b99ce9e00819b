/* The `auth:` configuration section. */
#include "services/auth/auth-service.h"

#include "core/cfg-read.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/cidr.h"
#include "net/listen-config.h"
#include "net/endpoint.h"
#include "clients/auth/auth-sasl.h"

#include <stdlib.h>
#include <string.h>

#define AUTH_MAX_LISTEN 16

void auth_config_defaults(struct auth_config *cfg)
{
    static const char *const listen[] = {"127.0.0.1:10200", NULL};
    static const char *const nets[] = {"127.0.0.0/8", "::1/128", NULL};
    static const char *const mechs[] = {"PLAIN", "LOGIN", NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = cfg_strv_dup(listen);
    cfg->allowed_nets = cfg_strv_dup(nets);
    cfg->socket_mode = 0660; /* owner and group: the login servers run as one of them */
    cfg->worker_threads = 0; /* one per CPU */
    cfg->max_queue = 1024;
    cfg->max_connections = 1024;
    cfg->max_connections_per_ip = 128;
    cfg->max_pending_per_connection = 4096;
    cfg->handshake_timeout_ms = 10000;
    cfg->idle_timeout_ms = 0;
    cfg->mechanisms = cfg_strv_dup(mechs);
    cfg->cache.max_bytes = 10 * 1024 * 1024;
    cfg->cache.ttl_ms = 3600 * 1000;
    cfg->cache.negative_ttl_ms = 60 * 1000;
    cfg->penalty.failure_delay_ms = 2000;
    cfg->penalty.max_delay_ms = 15000;
    cfg->penalty.decay_ms = 300 * 1000;
    cfg->penalty.max_tracked_ips = 100000;
    cfg->penalty.max_ip_failures = 20;
    cfg->penalty.max_user_failures = 20;
    cfg->warden_addr = xstrdup("");
    cfg->trusted_networks = xcalloc(1, sizeof(char *));
    cfg->trusted_clients = cfg_strv_dup(nets);
}

void auth_config_free(struct auth_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->allowed_nets);
    cfg_strv_free(cfg->mechanisms);
    free(cfg->warden_addr);
    cfg_strv_free(cfg->trusted_networks);
    cfg_strv_free(cfg->trusted_clients);
    auth_db_config_free(&cfg->passdb);
    auth_db_config_free(&cfg->userdb);
    memset(cfg, 0, sizeof(*cfg));
}

static bool read_nets(const struct cfg_ctx *ctx, const struct ynode *node, const char *key,
                      char ***out)
{
    char full[64];
    snprintf(full, sizeof(full), "auth.%s", key);
    if (!cfg_string_list(ctx, node, "auth", key, 1024, out, NULL))
        return false;
    for (size_t i = 0; (*out)[i] != NULL; i++) {
        struct cidr c;
        struct petrel_error e;
        if (!cidr_parse((*out)[i], &c, &e))
            return cfg_fail(ctx, cfg_list_item(node, key, i), full, "%s", e.message);
    }
    return true;
}

/* The limits on failed logins and whom they spare. */
static bool read_penalty_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                struct auth_config *cfg)
{
    return cfg_int(ctx, node, "auth", "max_failures_per_ip", 0, 1000000,
                   &cfg->penalty.max_ip_failures) &&
           cfg_int(ctx, node, "auth", "max_failures_per_user", 0, 1000000,
                   &cfg->penalty.max_user_failures) &&
           read_nets(ctx, node, "trusted_networks", &cfg->trusted_networks) &&
           read_nets(ctx, node, "trusted_clients", &cfg->trusted_clients);
}

/* After listen_config_read_server(): the component listens somewhere. */
static bool check_listen_count(const struct cfg_ctx *ctx, const struct ynode *node, size_t count)
{
    if (count == 0)
        return cfg_fail(ctx, ynode_get(node, "listen"), "auth.listen", "needs an address");
    return true;
}

static bool check_mechanisms(const struct cfg_ctx *ctx, const struct ynode *node, char **mechs)
{
    for (size_t i = 0; mechs != NULL && mechs[i] != NULL; i++) {
        if (sasl_mech_parse(mechs[i]) == SASL_MECH_UNKNOWN)
            return cfg_fail(ctx, cfg_list_item(node, "mechanisms", i), "auth.mechanisms",
                            "unknown SASL mechanism '%s' (PLAIN, LOGIN)", mechs[i]);
    }
    return true;
}

static bool read_db(const struct cfg_ctx *ctx, const struct ynode *node, const char *key,
                    bool is_passdb, struct auth_db_config *db)
{
    char path[32];
    snprintf(path, sizeof(path), "auth.%s", key);
    return auth_db_config_read(ctx, ynode_get(node, key), path, is_passdb, db);
}

bool auth_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct auth_config *cfg)
{
    static const char *const keys[] = {LISTEN_CONFIG_SERVER_KEYS,
                                       "worker_threads",
                                       "max_queue",
                                       "max_pending_per_connection",
                                       "idle_timeout",
                                       "mechanisms",
                                       "cache_size",
                                       "cache_ttl",
                                       "cache_negative_ttl",
                                       "failure_delay",
                                       "failure_delay_max",
                                       "failure_decay",
                                       "penalty_max_ips",
                                       "max_failures_per_ip",
                                       "max_failures_per_user",
                                       "trusted_networks",
                                       "trusted_clients",
                                       "warden_addr",
                                       "passdb",
                                       "userdb",
                                       NULL};
    const struct listen_config_server server = LISTEN_CONFIG_SERVER_OF(cfg);
    const char *p = "auth";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    int64_t cache_size = (int64_t)cfg->cache.max_bytes;
    size_t listen_count = 0;
    if (!listen_config_read_server(ctx, node, p, AUTH_MAX_LISTEN, &server, &listen_count) ||
        !check_listen_count(ctx, node, listen_count) ||
        !cfg_int(ctx, node, p, "worker_threads", 0, 64, &cfg->worker_threads) ||
        !cfg_int(ctx, node, p, "max_queue", 1, 1000000, &cfg->max_queue) ||
        !cfg_int(ctx, node, p, "max_pending_per_connection", 1, 100000,
                 &cfg->max_pending_per_connection) ||
        !cfg_duration_ms(ctx, node, p, "idle_timeout", 0, 86400000, &cfg->idle_timeout_ms) ||
        !cfg_string_list(ctx, node, p, "mechanisms", 8, &cfg->mechanisms, NULL) ||
        !check_mechanisms(ctx, node, cfg->mechanisms) ||
        !cfg_int(ctx, node, p, "cache_size", 0, (int64_t)16 << 30, &cache_size) ||
        !cfg_duration_ms(ctx, node, p, "cache_ttl", 0, 7 * 86400000LL, &cfg->cache.ttl_ms) ||
        !cfg_duration_ms(ctx, node, p, "cache_negative_ttl", 0, 7 * 86400000LL,
                         &cfg->cache.negative_ttl_ms) ||
        !cfg_duration_ms(ctx, node, p, "failure_delay", 0, 60000, &cfg->penalty.failure_delay_ms) ||
        !cfg_duration_ms(ctx, node, p, "failure_delay_max", 0, 600000,
                         &cfg->penalty.max_delay_ms) ||
        !cfg_duration_ms(ctx, node, p, "failure_decay", 1000, 86400000, &cfg->penalty.decay_ms) ||
        !cfg_int(ctx, node, p, "penalty_max_ips", 1, 100000000, &cfg->penalty.max_tracked_ips) ||
        !cfg_string(ctx, node, p, "warden_addr", &cfg->warden_addr) ||
        !read_penalty_limits(ctx, node, cfg))
        return false;
    if (!listen_config_check_target(ctx, node, "auth", "warden_addr", cfg->warden_addr,
                                    NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK))
        return false;
    cfg->cache.max_bytes = (size_t)cache_size;
    if (cfg->penalty.max_delay_ms < cfg->penalty.failure_delay_ms)
        return cfg_fail(ctx, ynode_get(node, "failure_delay_max"), "auth.failure_delay_max",
                        "must not be below failure_delay");
    const struct ynode *passdb = ynode_get(node, "passdb");
    if (passdb == NULL) {
        if (required)
            return cfg_fail(ctx, node, p, "the auth component needs a passdb");
    } else {
        if (!read_db(ctx, node, "passdb", true, &cfg->passdb))
            return false;
        cfg->has_passdb = true;
    }
    if (ynode_get(node, "userdb") != NULL) {
        if (!read_db(ctx, node, "userdb", false, &cfg->userdb))
            return false;
        cfg->has_userdb = true;
    }
    return true;
}

void auth_config_print(const struct auth_config *cfg, FILE *out)
{
    fputs("auth:\n", out);
    listen_config_print(out, "  ", cfg->listen, cfg->allowed_nets, cfg->socket_mode);
    fprintf(out,
            "  worker_threads: %lld\n  max_queue: %lld\n  max_connections: %lld\n"
            "  max_connections_per_ip: %lld\n  max_pending_per_connection: %lld\n"
            "  handshake_timeout: %lldms\n  idle_timeout: %lldms\n",
            (long long)cfg->worker_threads, (long long)cfg->max_queue,
            (long long)cfg->max_connections, (long long)cfg->max_connections_per_ip,
            (long long)cfg->max_pending_per_connection, (long long)cfg->handshake_timeout_ms,
            (long long)cfg->idle_timeout_ms);
    yaml_put_list(out, "  ", "mechanisms", cfg->mechanisms);
    fprintf(out,
            "  cache_size: %zu\n  cache_ttl: %lldms\n  cache_negative_ttl: %lldms\n"
            "  failure_delay: %lldms\n  failure_delay_max: %lldms\n  failure_decay: %lldms\n"
            "  penalty_max_ips: %lld\n",
            cfg->cache.max_bytes, (long long)cfg->cache.ttl_ms,
            (long long)cfg->cache.negative_ttl_ms, (long long)cfg->penalty.failure_delay_ms,
            (long long)cfg->penalty.max_delay_ms, (long long)cfg->penalty.decay_ms,
            (long long)cfg->penalty.max_tracked_ips);
    yaml_put_kv(out, "  ", "warden_addr", cfg->warden_addr);
    fprintf(out, "  max_failures_per_ip: %lld\n  max_failures_per_user: %lld\n",
            (long long)cfg->penalty.max_ip_failures, (long long)cfg->penalty.max_user_failures);
    yaml_put_list(out, "  ", "trusted_networks", cfg->trusted_networks);
    yaml_put_list(out, "  ", "trusted_clients", cfg->trusted_clients);
    if (cfg->has_passdb) {
        fputs("  passdb:\n", out);
        auth_db_config_print(&cfg->passdb, "    ", out);
    }
    if (cfg->has_userdb) {
        fputs("  userdb:\n", out);
        auth_db_config_print(&cfg->userdb, "    ", out);
    }
}
