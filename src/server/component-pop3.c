/* The `pop3` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "protocols/pop3/pop3-config.h"
#include "protocols/pop3/pop3-server.h"

static void section_defaults(struct petrel_config *cfg)
{
    pop3_config_defaults(&cfg->pop3);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return pop3_config_read(ctx, node, enabled, &cfg->pop3);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    pop3_config_print(&cfg->pop3, out);
}

static void section_free(struct petrel_config *cfg)
{
    pop3_config_free(&cfg->pop3);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return pop3_server_start(s->env, &s->config->pop3, s->storage, err);
}

static void stop_accepting(void *c)
{
    pop3_server_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return pop3_server_sessions(c);
}

static const char *address(const void *c)
{
    return pop3_server_address(c);
}

static void free_component(void *c)
{
    pop3_server_free(c);
}

const struct component_def component_pop3 = {
    .name = "pop3",
    .section = "pop3",
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
