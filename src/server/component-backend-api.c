/* The `backend-api` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "services/backend-api/backend-api.h"
#include "services/warden/warden-config.h"

static void section_defaults(struct petrel_config *cfg)
{
    backend_api_config_defaults(&cfg->backend_api);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    (void)enabled;
    /* The API asks the warden for sessions (api-who): the warden's first
     * listener, read before (the table's order). */
    cfg->backend_api.warden_addr = warden_config_client_address(&cfg->warden);
    cfg->backend_api.quota = &cfg->quota; /* quota/show reads the site-wide options */
    return backend_api_config_read(ctx, node, &cfg->backend_api);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    backend_api_config_print(&cfg->backend_api, out);
}

static void section_free(struct petrel_config *cfg)
{
    backend_api_config_free(&cfg->backend_api);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return backend_api_start(s->env, &s->config->backend_api, s->config->dicts, s->storage, err);
}

static void stop_accepting(void *c)
{
    backend_api_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return backend_api_in_flight(c);
}

static void abandon(void *c)
{
    backend_api_abandon_in_flight(c);
}

static const char *address(const void *c)
{
    return backend_api_address(c);
}

static void free_component(void *c)
{
    backend_api_free(c);
}

const struct component_def component_backend_api = {
    .name = "backend-api",
    .section = "backend_api",
    .config_defaults = section_defaults,
    .config_read = section_read,
    .config_print = section_print,
    .config_free = section_free,
    .start = start,
    .stop_accepting = stop_accepting,
    .in_flight = in_flight,
    .abandon = abandon,
    .address = address,
    .free = free_component,
};
