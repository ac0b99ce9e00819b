/* The component table (component.h): one definition per component, in
 * start order. Most of a definition is the same few lines for every
 * component (its section's functions on its field of struct petrel_config,
 * its life's functions on its own type), written once in the macros below;
 * what differs is written out where the component is defined. */
#include "server/component.h"

#include "clients/auth/auth-penalty.h"
#include "clients/warden/warden-penalty-store.h"
#include "protocols/imap/imap-config.h"
#include "protocols/imap/imap-server.h"
#include "protocols/lmtp/lmtp-config.h"
#include "protocols/lmtp/lmtp-server.h"
#include "protocols/pop3/pop3-config.h"
#include "protocols/pop3/pop3-server.h"
#include "server/config.h"
#include "server/login-service.h"
#include "services/auth/auth-service.h"
#include "services/backend-api/backend-api.h"
#include "services/director/director-config.h"
#include "services/director/director-service.h"
#include "services/monitor/monitor-config.h"
#include "services/monitor/monitor-service.h"
#include "services/quota-status/quota-status-service.h"
#include "services/warden/warden-config.h"
#include "services/warden/warden-service.h"
#include "storage/quota/quota-config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* <id>_defaults, _print and _free_section: `prefix`_config_* on `field`. */
#define SECTION_FUNCS(id, field, prefix)                                                           \
    static void comp_##id##_defaults(struct petrel_config *cfg)                                    \
    {                                                                                              \
        prefix##_config_defaults(&cfg->field);                                                     \
    }                                                                                              \
    static void comp_##id##_print(const struct petrel_config *cfg, FILE *out)                      \
    {                                                                                              \
        prefix##_config_print(&cfg->field, out);                                                   \
    }                                                                                              \
    static void comp_##id##_free_section(struct petrel_config *cfg)                                \
    {                                                                                              \
        prefix##_config_free(&cfg->field);                                                         \
    }

/* <id>_read for a reader that takes whether the component is enabled. */
#define SECTION_READ(id, field, prefix)                                                            \
    static bool comp_##id##_read(const struct cfg_ctx *ctx, const struct ynode *node,              \
                                 bool enabled, struct petrel_config *cfg)                          \
    {                                                                                              \
        return prefix##_config_read(ctx, node, enabled, &cfg->field);                              \
    }

/* <id>_stop and <id>_free on a running `struct type`. */
#define LIFE_FUNCS(id, type, stop_fn, free_fn)                                                     \
    static void comp_##id##_stop(void *c)                                                          \
    {                                                                                              \
        stop_fn((struct type *)c);                                                                 \
    }                                                                                              \
    static void comp_##id##_free(void *c)                                                          \
    {                                                                                              \
        free_fn((struct type *)c);                                                                 \
    }

/* <id>_<what> answering `fn` of a running `struct type`. */
#define LIFE_QUERY(id, what, ret, type, fn)                                                        \
    static ret comp_##id##_##what(const void *c)                                                   \
    {                                                                                              \
        return fn((const struct type *)c);                                                         \
    }

/* ---------- auth ---------- */

SECTION_FUNCS(auth, auth, auth)
SECTION_READ(auth, auth, auth)
LIFE_FUNCS(auth, auth_service, auth_service_stop_accepting, auth_service_free)
LIFE_QUERY(auth, in_flight, size_t, auth_service, auth_service_in_flight)
LIFE_QUERY(auth, address, const char *, auth_service, auth_service_address)

/* Where auth counts failed logins: shared in the warden named by
 * auth.warden_addr, so that every auth instance using it sees one count per
 * address, or in this process. The process wires it, so auth does not
 * include the warden (docs/architecture.md). */
static void *comp_auth_start(const struct component_start *s, struct petrel_error *err)
{
    const struct auth_config *cfg = &s->config->auth;
    struct auth_penalty_store penalty;
    if (cfg->warden_addr == NULL || cfg->warden_addr[0] == '\0') {
        penalty = auth_penalty_local_store(&cfg->penalty);
    } else {
        char host[256] = "localhost", instance[160];
        gethostname(host, sizeof(host) - 1);
        snprintf(instance, sizeof(instance), "auth@%.60s:%.60s", host, cfg->listen[0]);
        penalty =
            warden_penalty_store_new(s->env->base, cfg->warden_addr, instance, &cfg->penalty, err);
        if (penalty.ops == NULL)
            return NULL;
    }
    return auth_service_start(s->env, cfg, penalty, err);
}

static const struct component_def component_auth = {
    .name = "auth",
    .section = "auth",
    .config_defaults = comp_auth_defaults,
    .config_read = comp_auth_read,
    .config_print = comp_auth_print,
    .config_free = comp_auth_free_section,
    .start = comp_auth_start,
    .stop_accepting = comp_auth_stop,
    .in_flight = comp_auth_in_flight,
    .address = comp_auth_address,
    .free = comp_auth_free,
};

/* ---------- director ---------- */

SECTION_FUNCS(director, director, director)
LIFE_FUNCS(director, director_service, director_service_stop_accepting, director_service_free)
LIFE_QUERY(director, in_flight, size_t, director_service, director_service_in_flight)
LIFE_QUERY(director, address, const char *, director_service, director_service_api_address)

static bool comp_director_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                               struct petrel_config *cfg)
{
    (void)enabled;
    return director_config_read(ctx, node, &cfg->director);
}

static void *comp_director_start(const struct component_start *s, struct petrel_error *err)
{
    return director_service_start(s->env, &s->config->director, err);
}

static void comp_director_abandon(void *c)
{
    director_service_abandon_in_flight(c);
}

static const struct component_def component_director = {
    .name = "director",
    .section = "director",
    .config_defaults = comp_director_defaults,
    .config_read = comp_director_read,
    .config_print = comp_director_print,
    .config_free = comp_director_free_section,
    .start = comp_director_start,
    .stop_accepting = comp_director_stop,
    .in_flight = comp_director_in_flight,
    .abandon = comp_director_abandon,
    .address = comp_director_address,
    .free = comp_director_free,
};

/* ---------- monitor ---------- */

SECTION_FUNCS(monitor, monitor, monitor)
LIFE_FUNCS(monitor, monitor_service, monitor_service_stop, monitor_service_free)
LIFE_QUERY(monitor, in_flight, size_t, monitor_service, monitor_service_in_flight)

static bool comp_monitor_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                              struct petrel_config *cfg)
{
    (void)enabled;
    return monitor_section_read(ctx, node, &cfg->monitor);
}

/* The monitor's own file (MONITOR_CONFIG, monitor.config_file), read once
 * the component list is final. */
static bool comp_monitor_finish(struct petrel_config *cfg, struct petrel_error *err)
{
    return monitor_config_load(&cfg->monitor, err);
}

static void *comp_monitor_start(const struct component_start *s, struct petrel_error *err)
{
    return monitor_service_start(s->env, &s->config->monitor, err);
}

static const struct component_def component_monitor = {
    .name = "monitor",
    .section = "monitor",
    .config_defaults = comp_monitor_defaults,
    .config_read = comp_monitor_read,
    .config_finish = comp_monitor_finish,
    .config_print = comp_monitor_print,
    .config_free = comp_monitor_free_section,
    .start = comp_monitor_start,
    .stop_accepting = comp_monitor_stop, /* no more probes, the director link closed */
    .in_flight = comp_monitor_in_flight,
    .free = comp_monitor_free,
};

/* ---------- warden ---------- */

SECTION_FUNCS(warden, warden, warden)
SECTION_READ(warden, warden, warden)
LIFE_FUNCS(warden, warden_service, warden_service_stop_accepting, warden_service_free)
LIFE_QUERY(warden, address, const char *, warden_service, warden_service_address)

static void *comp_warden_start(const struct component_start *s, struct petrel_error *err)
{
    return warden_service_start(s->env, &s->config->warden, err);
}

/* No in_flight: its connections are the long-lived links of the login
 * servers and auth, which the drain must not wait for. */
static const struct component_def component_warden = {
    .name = "warden",
    .section = "warden_service",
    .config_defaults = comp_warden_defaults,
    .config_read = comp_warden_read,
    .config_print = comp_warden_print,
    .config_free = comp_warden_free_section,
    .start = comp_warden_start,
    .stop_accepting = comp_warden_stop,
    .address = comp_warden_address,
    .free = comp_warden_free,
};

/* ---------- the mail front ends ---------- */

/* A mail server: started with the mail storage, its sessions in flight. */
#define MAIL_SERVER(id, srv_type)                                                                  \
    SECTION_FUNCS(id, id, id)                                                                      \
    SECTION_READ(id, id, id)                                                                       \
    LIFE_FUNCS(id, srv_type, srv_type##_stop_accepting, srv_type##_free)                           \
    LIFE_QUERY(id, in_flight, size_t, srv_type, srv_type##_sessions)                               \
    LIFE_QUERY(id, address, const char *, srv_type, srv_type##_address)                            \
    static void *comp_##id##_start(const struct component_start *s, struct petrel_error *err)      \
    {                                                                                              \
        return srv_type##_start(s->env, &s->config->id, s->storage, err);                          \
    }                                                                                              \
    static const struct component_def component_##id = {                                           \
        .name = #id,                                                                               \
        .section = #id,                                                                            \
        .config_defaults = comp_##id##_defaults,                                                   \
        .config_read = comp_##id##_read,                                                           \
        .config_print = comp_##id##_print,                                                         \
        .config_free = comp_##id##_free_section,                                                   \
        .start = comp_##id##_start,                                                                \
        .stop_accepting = comp_##id##_stop,                                                        \
        .in_flight = comp_##id##_in_flight,                                                        \
        .address = comp_##id##_address,                                                            \
        .free = comp_##id##_free,                                                                  \
    };

/* IMAP says BYE to every session at stop, LMTP 421 once each transaction is
 * over, POP3 -ERR without deletions. */
MAIL_SERVER(imap, imap_server)
MAIL_SERVER(lmtp, lmtp_server)
MAIL_SERVER(pop3, pop3_server)

/* ---------- login ---------- */

SECTION_FUNCS(login, login, login)
SECTION_READ(login, login, login)
LIFE_FUNCS(login, login_service, login_service_stop_accepting, login_service_free)
LIFE_QUERY(login, in_flight, size_t, login_service, login_service_in_flight)
LIFE_QUERY(login, address, const char *, login_service, login_service_address)

/* The login proxy needs no mail storage: it routes to the backends. */
static void *comp_login_start(const struct component_start *s, struct petrel_error *err)
{
    return login_service_start(s->env, &s->config->login, s->config->internal_tls.ca_file, err);
}

static const struct component_def component_login = {
    .name = "login",
    .section = "login",
    .config_defaults = comp_login_defaults,
    .config_read = comp_login_read,
    .config_print = comp_login_print,
    .config_free = comp_login_free_section,
    .start = comp_login_start,
    .stop_accepting = comp_login_stop,
    .in_flight = comp_login_in_flight,
    .address = comp_login_address,
    .free = comp_login_free,
};

/* ---------- quota-status ---------- */

SECTION_FUNCS(quota_status, quota, quota)
LIFE_FUNCS(quota_status, quota_status_service, quota_status_service_stop_accepting,
           quota_status_service_free)
LIFE_QUERY(quota_status, in_flight, size_t, quota_status_service, quota_status_service_in_flight)
LIFE_QUERY(quota_status, address, const char *, quota_status_service, quota_status_service_address)

/* The `quota:` section holds the storage's quota rules too: it is read
 * whether quota-status runs or not; `enabled` makes its listener required.
 * quota.quota_clone_dicts names dicts of the `dicts:` section (read before
 * the components' sections). */
static bool comp_quota_status_read(const struct cfg_ctx *ctx, const struct ynode *node,
                                   bool enabled, struct petrel_config *cfg)
{
    if (!quota_config_read(ctx, node, enabled, &cfg->quota))
        return false;
    for (size_t i = 0; cfg->quota.clone_dicts[i] != NULL; i++) {
        if (!dict_settings_has(cfg->dicts, cfg->quota.clone_dicts[i]))
            return cfg_fail(ctx, cfg_list_item(node, "quota_clone_dicts", i),
                            "quota.quota_clone_dicts",
                            "no dict named '%s' in dicts:", cfg->quota.clone_dicts[i]);
    }
    return true;
}

static void *comp_quota_status_start(const struct component_start *s, struct petrel_error *err)
{
    return quota_status_service_start(s->env, &s->config->quota, s->storage, err);
}

static const struct component_def component_quota_status = {
    .name = "quota-status",
    .section = "quota",
    .config_defaults = comp_quota_status_defaults,
    .config_read = comp_quota_status_read,
    .config_print = comp_quota_status_print,
    .config_free = comp_quota_status_free_section,
    .start = comp_quota_status_start,
    .stop_accepting = comp_quota_status_stop,
    .in_flight = comp_quota_status_in_flight,
    .address = comp_quota_status_address,
    .free = comp_quota_status_free,
};

/* ---------- backend-api ---------- */

SECTION_FUNCS(backend_api, backend_api, backend_api)
LIFE_FUNCS(backend_api, backend_api, backend_api_stop_accepting, backend_api_free)
LIFE_QUERY(backend_api, in_flight, size_t, backend_api, backend_api_in_flight)
LIFE_QUERY(backend_api, address, const char *, backend_api, backend_api_address)

static bool comp_backend_api_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                                  struct petrel_config *cfg)
{
    (void)enabled;
    /* The API asks the warden for sessions (api-who): the warden's first
     * listener, read before (the table's order); quota/show reads the
     * site-wide quota options. */
    cfg->backend_api.warden_addr = warden_config_client_address(&cfg->warden);
    cfg->backend_api.quota = &cfg->quota;
    return backend_api_config_read(ctx, node, &cfg->backend_api);
}

static void *comp_backend_api_start(const struct component_start *s, struct petrel_error *err)
{
    return backend_api_start(s->env, &s->config->backend_api, s->dicts, s->storage, err);
}

static void comp_backend_api_abandon(void *c)
{
    backend_api_abandon_in_flight(c);
}

static const struct component_def component_backend_api = {
    .name = "backend-api",
    .section = "backend_api",
    .config_defaults = comp_backend_api_defaults,
    .config_read = comp_backend_api_read,
    .config_print = comp_backend_api_print,
    .config_free = comp_backend_api_free_section,
    .start = comp_backend_api_start,
    .stop_accepting = comp_backend_api_stop,
    .in_flight = comp_backend_api_in_flight,
    .abandon = comp_backend_api_abandon,
    .address = comp_backend_api_address,
    .free = comp_backend_api_free,
};

/* ---------- the table ---------- */

const struct component_def *const component_table[] = {
    &component_auth,         /* the front ends ask it at login */
    &component_director,     /* routes users to backends */
    &component_monitor,      /* probes backends, tells the directors */
    &component_warden,       /* the session registry */
    &component_imap,         /* mail front end */
    &component_lmtp,         /* delivery */
    &component_pop3,         /* mail front end */
    &component_login,        /* the login proxy: routes clients to their backends */
    &component_quota_status, /* Postfix's policy service */
    &component_backend_api,  /* last: reports on the others */
    NULL,
};

size_t component_count(void)
{
    return sizeof(component_table) / sizeof(component_table[0]) - 1;
}

const struct component_def *component_find(const char *name)
{
    for (size_t i = 0; component_table[i] != NULL; i++) {
        if (strcmp(component_table[i]->name, name) == 0)
            return component_table[i];
    }
    return NULL;
}
