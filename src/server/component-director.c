/* The `director` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "services/director/director-config.h"
#include "services/director/director-service.h"

static void section_defaults(struct petrel_config *cfg)
{
    director_config_defaults(&cfg->director);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    (void)enabled;
    return director_config_read(ctx, node, &cfg->director);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    director_config_print(&cfg->director, out);
}

static void section_free(struct petrel_config *cfg)
{
    director_config_free(&cfg->director);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return director_service_start(s->env, &s->config->director, err);
}

static void stop_accepting(void *c)
{
    director_service_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return director_service_in_flight(c);
}

static void abandon(void *c)
{
    director_service_abandon_in_flight(c);
}

static const char *address(const void *c)
{
    return director_service_api_address(c);
}

static void free_component(void *c)
{
    director_service_free(c);
}

const struct component_def component_director = {
    .name = "director",
    .section = "director",
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
