/* The `director:` configuration section (director-config.h). */
#include "services/director/director-config.h"

#include "core/cfg-read.h"
#include "core/slice.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"
#include "services/director/director-backends.h"
#include "clients/ring/ring-auth.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define P "director"
#define TOKEN_FILE_MAX 4096

/* The ring port answers loopback only until the operator names the
 * cluster's networks: a wide default would let every pod on the network
 * try the ring port (docs/decisions.md). */
static const char *const ring_default_nets[] = {"127.0.0.0/8", "::1/128", NULL};

void director_config_defaults(struct director_config *cfg)
{
    static const char *const nets[] = {"127.0.0.0/8", "10.96.0.0/12", "10.244.0.0/16", NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->api_listen = xstrdup("127.0.0.1:9103");
    cfg->api_allowed_nets = cfg_strv_dup(nets);
    cfg->token_env = xstrdup("DIRECTOR_API_TOKEN");
    cfg->token_file = xstrdup("");
    cfg->api_request_timeout_ms = 30000;
    cfg->api_max_body_bytes = 64 * 1024;
    cfg->api_max_connections = 1024;
    cfg->api_max_connections_per_ip = 128;
    cfg->ring_listen = xstrdup(":9102");
    cfg->self = xstrdup("");
    cfg->ring_allowed_nets = cfg_strv_dup(ring_default_nets);
    cfg->ring_secret_file = xstrdup("");
    cfg->ring_secret_env = xstrdup("DIRECTOR_RING_SECRET");
    cfg->ring_auth_timeout_ms = 5000;
    cfg->ring_handshake_timeout_ms = 10000;
    cfg->ring_max_clients = 1024;
    cfg->ring_max_pending_per_address = 16;
    cfg->ring_max_line = 8192;
    cfg->ring_max_output = 4 * 1024 * 1024;
    cfg->ring_max_sessions_per_client = 100000;
    cfg->ring_reconnect_min_ms = 100;
    cfg->ring_reconnect_max_ms = 2000;
    cfg->ring_peer_timeout_ms = 2000;
    cfg->ring_ping_interval_ms = 5000;
    cfg->user_expire_ms = 15 * 60 * 1000;
    cfg->kill_timeout_ms = 2000;
    cfg->peers = xcalloc(1, sizeof(char *));
    cfg->max_users = 1000000;
    cfg->max_backends = 1024;
    cfg->max_vhosts = 1000;
    cfg->max_username = 255;
    cfg->max_tag = 64;
}

static void free_backends(struct director_config *cfg)
{
    for (size_t i = 0; i < cfg->backend_count; i++) {
        free(cfg->backends[i].ip);
        free(cfg->backends[i].tag);
    }
    free(cfg->backends);
    cfg->backends = NULL;
    cfg->backend_count = 0;
}

void director_config_free(struct director_config *cfg)
{
    free(cfg->api_listen);
    cfg_strv_free(cfg->api_allowed_nets);
    free(cfg->token_env);
    free(cfg->token_file);
    free(cfg->ring_listen);
    free(cfg->self);
    cfg_strv_free(cfg->ring_allowed_nets);
    free(cfg->ring_secret_file);
    free(cfg->ring_secret_env);
    cfg_strv_free(cfg->peers);
    free_backends(cfg);
    memset(cfg, 0, sizeof(*cfg));
}

/* The IP text and port of a parsed numeric endpoint. */
static bool endpoint_ip(const struct net_endpoint *ep, char ip[46], unsigned *port)
{
    net_addr_format_ip((const struct sockaddr *)&ep->addr.ss, ip, 46);
    *port = ep->port;
    return true;
}

bool director_parse_addr(const char *text, char ip[46], unsigned *port)
{
    struct net_endpoint ep;
    return net_endpoint_parse(text, NET_ENDPOINT_NAME_REJECT | NET_ENDPOINT_PORT_NONZERO, 0, &ep,
                              NULL) &&
           endpoint_ip(&ep, ip, port);
}

/* ---------- reading ---------- */

/* A ring member's address (director.ring.self, director.peers): the ring
 * knows its members by IP and port, so a host name is resolved here, once,
 * as Dovecot's director does with director_servers, and *text replaced by
 * "ip:port" / "[ip6]:port". An unresolvable name is an error. */
static bool resolve_member(const struct cfg_ctx *ctx, const struct ynode *at, const char *path,
                           char **text)
{
    struct net_endpoint ep;
    struct net_addr addr;
    struct petrel_error e;
    if (!net_endpoint_parse(*text, NET_ENDPOINT_PORT_NONZERO, 0, &ep, &e) ||
        !net_endpoint_resolve(&ep, &addr, &e))
        return cfg_fail(ctx, at, path, "%s", e.message);
    if (!ep.literal) {
        char formatted[80];
        net_addr_format((const struct sockaddr *)&addr.ss, formatted, sizeof(formatted));
        free(*text);
        *text = xstrdup(formatted);
    }
    return true;
}

static bool check_listen(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                         const char *value)
{
    struct petrel_error e;
    struct net_addr addr;
    memset(&addr, 0, sizeof(addr));
    if (net_addr_parse(value, &addr, &e) && addr.ss.ss_family != AF_UNIX)
        return true;
    char full[128];
    snprintf(full, sizeof(full), "%s.listen", path);
    return cfg_fail(ctx, ynode_get(map, "listen"), full, "%s",
                    addr.ss.ss_family == AF_UNIX ? "must be a TCP address" : e.message);
}

static bool read_api(const struct cfg_ctx *ctx, const struct ynode *node,
                     struct director_config *cfg)
{
    static const char *const keys[] = {"listen",
                                       "allowed_nets",
                                       "token_env",
                                       "token_file",
                                       "request_timeout",
                                       "max_body_bytes",
                                       "max_connections",
                                       "max_connections_per_ip",
                                       "allow_unauthenticated_remote",
                                       NULL};
    const char *p = P ".api";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_string(ctx, node, p, "listen", &cfg->api_listen) ||
        !check_listen(ctx, node, p, cfg->api_listen) ||
        !listen_config_read_nets(ctx, node, p, &cfg->api_allowed_nets) ||
        !cfg_string(ctx, node, p, "token_env", &cfg->token_env) ||
        !cfg_string(ctx, node, p, "token_file", &cfg->token_file) ||
        !cfg_duration_ms(ctx, node, p, "request_timeout", 100, 3600000,
                         &cfg->api_request_timeout_ms) ||
        !listen_config_read_api_limits(ctx, node, p, 16 * 1024 * 1024, &cfg->api_max_body_bytes,
                                       &cfg->api_max_connections,
                                       &cfg->api_max_connections_per_ip) ||
        !cfg_bool(ctx, node, p, "allow_unauthenticated_remote",
                  &cfg->api_allow_unauthenticated_remote))
        return false;
    const struct ynode *listen = ynode_get(node, "listen");
    if (listen != NULL)
        cfg->api_listen_line = listen->line;
    if (cfg->token_env[0] == '\0')
        return cfg_fail(ctx, ynode_get(node, "token_env"), P ".api.token_env",
                        "must name an environment variable");
    return true;
}

static bool read_ring(const struct cfg_ctx *ctx, const struct ynode *node,
                      struct director_config *cfg)
{
    static const char *const keys[] = {"listen",
                                       "self",
                                       "allowed_nets",
                                       "secret_file",
                                       "secret_env",
                                       "allow_unauthenticated",
                                       "auth_timeout",
                                       "handshake_timeout",
                                       "max_clients",
                                       "max_pending_per_address",
                                       "max_line",
                                       "max_output",
                                       "max_sessions_per_client",
                                       "reconnect_min",
                                       "reconnect_max",
                                       "peer_timeout",
                                       "ping_interval",
                                       NULL};
    const char *p = P ".ring";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_string(ctx, node, p, "listen", &cfg->ring_listen) ||
        !check_listen(ctx, node, p, cfg->ring_listen) ||
        !cfg_string(ctx, node, p, "self", &cfg->self) ||
        !listen_config_read_nets(ctx, node, p, &cfg->ring_allowed_nets) ||
        !cfg_string(ctx, node, p, "secret_file", &cfg->ring_secret_file) ||
        !cfg_string(ctx, node, p, "secret_env", &cfg->ring_secret_env) ||
        !cfg_bool(ctx, node, p, "allow_unauthenticated", &cfg->ring_allow_unauthenticated) ||
        !cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &cfg->ring_auth_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "handshake_timeout", 100, 3600000,
                         &cfg->ring_handshake_timeout_ms) ||
        !cfg_int(ctx, node, p, "max_clients", 1, 1000000, &cfg->ring_max_clients) ||
        !cfg_int(ctx, node, p, "max_pending_per_address", 1, 1000000,
                 &cfg->ring_max_pending_per_address) ||
        !cfg_int(ctx, node, p, "max_line", 512, 1024 * 1024, &cfg->ring_max_line) ||
        !cfg_int(ctx, node, p, "max_output", 64 * 1024, (int64_t)1 << 30, &cfg->ring_max_output) ||
        !cfg_int(ctx, node, p, "max_sessions_per_client", 0, 100000000,
                 &cfg->ring_max_sessions_per_client) ||
        !cfg_duration_ms(ctx, node, p, "reconnect_min", 10, 3600000, &cfg->ring_reconnect_min_ms) ||
        !cfg_duration_ms(ctx, node, p, "reconnect_max", 10, 3600000, &cfg->ring_reconnect_max_ms) ||
        !cfg_duration_ms(ctx, node, p, "peer_timeout", 100, 3600000, &cfg->ring_peer_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "ping_interval", 100, 3600000, &cfg->ring_ping_interval_ms))
        return false;
    if (cfg->ring_reconnect_max_ms < cfg->ring_reconnect_min_ms)
        return cfg_fail(
            ctx, ynode_get(node, "reconnect_max") != NULL ? ynode_get(node, "reconnect_max") : node,
            P ".ring.reconnect_max", "must not be below reconnect_min (%lldms)",
            (long long)cfg->ring_reconnect_min_ms);
    if (cfg->ring_secret_env[0] == '\0')
        return cfg_fail(ctx, ynode_get(node, "secret_env"), P ".ring.secret_env",
                        "must name an environment variable");
    return cfg->self[0] == '\0' ||
           resolve_member(ctx, ynode_get(node, "self"), P ".ring.self", &cfg->self);
}

static bool read_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                        struct director_config *cfg)
{
    static const char *const keys[] = {"max_users",    "max_backends", "max_vhosts",
                                       "max_username", "max_tag",      NULL};
    const char *p = P ".limits";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    return cfg_int(ctx, node, p, "max_users", 1, 1000000000, &cfg->max_users) &&
           cfg_int(ctx, node, p, "max_backends", 1, 1000000, &cfg->max_backends) &&
           cfg_int(ctx, node, p, "max_vhosts", 1, 100000, &cfg->max_vhosts) &&
           cfg_int(ctx, node, p, "max_username", 1, 255, &cfg->max_username) &&
           cfg_int(ctx, node, p, "max_tag", 0, 255, &cfg->max_tag);
}

static bool read_peers(const struct cfg_ctx *ctx, const struct ynode *node,
                       struct director_config *cfg)
{
    if (!cfg_string_list(ctx, node, P, "peers", DIRECTOR_MAX_PEERS, &cfg->peers, NULL))
        return false;
    for (size_t i = 0; cfg->peers[i] != NULL; i++) {
        if (!resolve_member(ctx, cfg_list_item(node, "peers", i), P ".peers", &cfg->peers[i]))
            return false;
    }
    return true;
}

static bool read_backend(const struct cfg_ctx *ctx, const struct ynode *item,
                         const struct director_config *cfg, struct director_backend_config *b)
{
    static const char *const keys[] = {"ip", "port", "tag", "vhosts", NULL};
    const char *p = P ".backends";
    if (item->type != YNODE_MAP)
        return cfg_fail(ctx, item, p, "each backend is a mapping with ip, port, tag, vhosts");
    if (!cfg_check_keys(ctx, item, p, keys) || !cfg_string(ctx, item, p, "ip", &b->ip) ||
        !cfg_int(ctx, item, p, "port", 1, 65535, &b->port) ||
        !cfg_string(ctx, item, p, "tag", &b->tag) ||
        !cfg_int(ctx, item, p, "vhosts", 0, cfg->max_vhosts, &b->vhosts))
        return false;
    char canon[DIRECTOR_IP_MAX];
    if (b->ip == NULL || !director_ip_canonical(b->ip, canon))
        return cfg_fail(ctx, item, P ".backends.ip", "an IPv4 or IPv6 address is required");
    free(b->ip);
    b->ip = xstrdup(canon);
    if (b->port == 0)
        return cfg_fail(ctx, item, P ".backends.port", "is required");
    if (strlen(b->tag) > (size_t)cfg->max_tag)
        return cfg_fail(ctx, ynode_get(item, "tag"), P ".backends.tag",
                        "longer than limits.max_tag (%lld)", (long long)cfg->max_tag);
    return true;
}

static bool read_backends(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct director_config *cfg)
{
    const struct ynode *list = ynode_get(node, "backends");
    if (list == NULL || (list->type == YNODE_SCALAR && list->scalar[0] == '\0' && !list->quoted))
        return true;
    if (list->type != YNODE_SEQ)
        return cfg_fail(ctx, list, P ".backends", "expected a list");
    if (list->count > DIRECTOR_MAX_INITIAL_BACKENDS || list->count > (size_t)cfg->max_backends)
        return cfg_fail(ctx, list, P ".backends", "more backends than limits.max_backends");
    cfg->backends = xcalloc(list->count + 1, sizeof(*cfg->backends));
    for (size_t i = 0; i < list->count; i++) {
        struct director_backend_config *b = &cfg->backends[cfg->backend_count++];
        b->tag = xstrdup("");
        b->vhosts = 100;
        if (!read_backend(ctx, list->items[i], cfg, b))
            return false;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(cfg->backends[k].ip, b->ip) == 0)
                return cfg_fail(ctx, list->items[i], P ".backends", "backend %s listed twice",
                                b->ip);
        }
    }
    return true;
}

bool director_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct director_config *cfg)
{
    static const char *const keys[] = {"api",   "ring",     "user_expire", "kill_timeout",
                                       "peers", "backends", "limits",      NULL};
    if (!cfg_expect_map(ctx, node, P) || !cfg_check_keys(ctx, node, P, keys))
        return false;
    return read_api(ctx, ynode_get(node, "api"), cfg) &&
           read_ring(ctx, ynode_get(node, "ring"), cfg) &&
           read_limits(ctx, ynode_get(node, "limits"), cfg) &&
           cfg_duration_ms(ctx, node, P, "user_expire", 1000, 30LL * 86400000,
                           &cfg->user_expire_ms) &&
           cfg_duration_ms(ctx, node, P, "kill_timeout", 0, 600000, &cfg->kill_timeout_ms) &&
           read_peers(ctx, node, cfg) && read_backends(ctx, node, cfg);
}

/* ---------- the token ---------- */

static bool read_token_file(const char *path, char **out, struct petrel_error *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot read the API token file %s: %s", path,
                                strerror(errno));
    char data[TOKEN_FILE_MAX + 1];
    size_t n = fread(data, 1, sizeof(data), f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot read the API token file %s", path);
    if (n > TOKEN_FILE_MAX)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "the API token file %s is larger than %d bytes", path,
                                TOKEN_FILE_MAX);
    size_t start = 0;
    while (start < n && isspace((unsigned char)data[start]))
        start++;
    while (n > start && isspace((unsigned char)data[n - 1]))
        n--;
    *out = xstrndup(data + start, n - start);
    return true;
}

bool director_config_token(const struct director_config *cfg, char **out, struct petrel_error *err)
{
    *out = NULL;
    if (cfg->token_file[0] != '\0')
        return read_token_file(cfg->token_file, out, err);
    char name[256];
    snprintf(name, sizeof(name), "%s_FILE", cfg->token_env);
    const char *file = getenv(name);
    if (file != NULL && *file != '\0')
        return read_token_file(file, out, err);
    const char *value = getenv(cfg->token_env);
    *out = xstrdup(value != NULL ? value : "");
    return true;
}

/* ---------- the ring secret ---------- */

bool director_config_ring_secret(const struct director_config *cfg, char **out,
                                 struct petrel_error *err)
{
    if (!ring_secret_load(cfg->ring_secret_file, cfg->ring_secret_env, P ".ring.secret_file", out,
                          err))
        return false;
    if ((*out)[0] != '\0' || cfg->ring_allow_unauthenticated)
        return true;
    ring_secret_free(*out);
    *out = NULL;
    return petrel_error_set(
        err, PETREL_ERR_INVALID,
        P ".ring: no ring secret: set director.ring.secret_file (or %s / %s_FILE) to a file "
          "holding a shared secret of at least %d bytes, or set "
          "director.ring.allow_unauthenticated: true to let anyone in ring.allowed_nets "
          "change the ring",
        cfg->ring_secret_env, cfg->ring_secret_env, RING_SECRET_MIN);
}

/* ---------- printing ---------- */

void director_config_print(const struct director_config *cfg, FILE *out)
{
    fputs("director:\n  api:\n", out);
    yaml_put_kv(out, "    ", "listen", cfg->api_listen);
    yaml_put_list(out, "    ", "allowed_nets", cfg->api_allowed_nets);
    yaml_put_kv(out, "    ", "token_env", cfg->token_env);
    yaml_put_kv(out, "    ", "token_file", cfg->token_file);
    fprintf(out, "    request_timeout: %lldms\n", (long long)cfg->api_request_timeout_ms);
    listen_config_print_api_limits(out, "    ", cfg->api_max_body_bytes, cfg->api_max_connections,
                                   cfg->api_max_connections_per_ip,
                                   cfg->api_allow_unauthenticated_remote);
    fputs("  ring:\n", out);
    yaml_put_kv(out, "    ", "listen", cfg->ring_listen);
    yaml_put_kv(out, "    ", "self", cfg->self);
    yaml_put_list(out, "    ", "allowed_nets", cfg->ring_allowed_nets);
    yaml_put_kv(out, "    ", "secret_file", cfg->ring_secret_file);
    yaml_put_kv(out, "    ", "secret_env", cfg->ring_secret_env);
    fprintf(out, "    allow_unauthenticated: %s\n    auth_timeout: %lldms\n",
            cfg->ring_allow_unauthenticated ? "true" : "false",
            (long long)cfg->ring_auth_timeout_ms);
    fprintf(out,
            "    handshake_timeout: %lldms\n    max_clients: %lld\n"
            "    max_pending_per_address: %lld\n    max_line: %lld\n"
            "    max_output: %lld\n    max_sessions_per_client: %lld\n",
            (long long)cfg->ring_handshake_timeout_ms, (long long)cfg->ring_max_clients,
            (long long)cfg->ring_max_pending_per_address, (long long)cfg->ring_max_line,
            (long long)cfg->ring_max_output, (long long)cfg->ring_max_sessions_per_client);
    fprintf(out,
            "    reconnect_min: %lldms\n    reconnect_max: %lldms\n    peer_timeout: %lldms\n    "
            "ping_interval: %lldms\n",
            (long long)cfg->ring_reconnect_min_ms, (long long)cfg->ring_reconnect_max_ms,
            (long long)cfg->ring_peer_timeout_ms, (long long)cfg->ring_ping_interval_ms);
    fprintf(out, "  user_expire: %lldms\n  kill_timeout: %lldms\n", (long long)cfg->user_expire_ms,
            (long long)cfg->kill_timeout_ms);
    yaml_put_list(out, "  ", "peers", cfg->peers);
    fprintf(out, "  backends:%s\n", cfg->backend_count == 0 ? " []" : "");
    for (size_t i = 0; i < cfg->backend_count; i++) {
        const struct director_backend_config *b = &cfg->backends[i];
        yaml_put_kv(out, "    - ", "ip", b->ip);
        fprintf(out, "      port: %lld\n", (long long)b->port);
        yaml_put_kv(out, "      ", "tag", b->tag);
        fprintf(out, "      vhosts: %lld\n", (long long)b->vhosts);
    }
    fprintf(out,
            "  limits:\n    max_users: %lld\n    max_backends: %lld\n    max_vhosts: %lld\n"
            "    max_username: %lld\n    max_tag: %lld\n",
            (long long)cfg->max_users, (long long)cfg->max_backends, (long long)cfg->max_vhosts,
            (long long)cfg->max_username, (long long)cfg->max_tag);
}
