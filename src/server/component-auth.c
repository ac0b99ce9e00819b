/* The `auth` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "clients/auth/auth-penalty.h"
#include "clients/warden/warden-penalty-store.h"
#include "services/auth/auth-service.h"

#include <stdio.h>
#include <unistd.h>

static void section_defaults(struct petrel_config *cfg)
{
    auth_config_defaults(&cfg->auth);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return auth_config_read(ctx, node, enabled, &cfg->auth);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    auth_config_print(&cfg->auth, out);
}

static void section_free(struct petrel_config *cfg)
{
    auth_config_free(&cfg->auth);
}

/* Where auth counts failed logins: shared in the warden named by
 * auth.warden_addr, so that every auth instance using it sees one count per
 * address, or in this process. The process wires it, so auth does not
 * include the warden (docs/architecture.md). */
static struct auth_penalty_store penalty_store(const struct component_start *s,
                                               struct petrel_error *err)
{
    const struct auth_config *cfg = &s->config->auth;
    if (cfg->warden_addr == NULL || cfg->warden_addr[0] == '\0')
        return auth_penalty_local_store(&cfg->penalty);
    char host[256] = "localhost", instance[160];
    gethostname(host, sizeof(host) - 1);
    snprintf(instance, sizeof(instance), "auth@%.60s:%.60s", host, cfg->listen[0]);
    return warden_penalty_store_new(s->env->base, cfg->warden_addr, instance, &cfg->penalty, err);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    struct auth_penalty_store penalty = penalty_store(s, err);
    if (penalty.ops == NULL)
        return NULL;
    return auth_service_start(s->env, &s->config->auth, penalty, err);
}

static void stop_accepting(void *c)
{
    auth_service_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return auth_service_in_flight(c);
}

static const char *address(const void *c)
{
    return auth_service_address(c);
}

static void free_component(void *c)
{
    auth_service_free(c);
}

const struct component_def component_auth = {
    .name = "auth",
    .section = "auth",
    .config_defaults = section_defaults,
    .config_read = section_read,
    .config_print = section_print,
    .config_free = section_free,
    .start = start,
    .stop_accepting = stop_accepting,
    .in_flight = in_flight,
    .address = address,
    .free = free_component,
};
