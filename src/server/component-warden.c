/* The `warden` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "services/warden/warden-config.h"
#include "services/warden/warden-service.h"

static void section_defaults(struct petrel_config *cfg)
{
    warden_config_defaults(&cfg->warden);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return warden_config_read(ctx, node, enabled, &cfg->warden);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    warden_config_print(&cfg->warden, out);
}

static void section_free(struct petrel_config *cfg)
{
    warden_config_free(&cfg->warden);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return warden_service_start(s->env, &s->config->warden, err);
}

static void stop_accepting(void *c)
{
    warden_service_stop_accepting(c);
}

static const char *address(const void *c)
{
    return warden_service_address(c);
}

static void free_component(void *c)
{
    warden_service_free(c);
}

const struct component_def component_warden = {
    .name = "warden",
    .section = "warden_service",
    .config_defaults = section_defaults,
    .config_read = section_read,
    .config_print = section_print,
    .config_free = section_free,
    .start = start,
    .stop_accepting = stop_accepting,
    .address = address,
    .free = free_component,
};
