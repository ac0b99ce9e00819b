/* The `imap` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "protocols/imap/imap-config.h"
#include "protocols/imap/imap-server.h"

static void section_defaults(struct petrel_config *cfg)
{
    imap_config_defaults(&cfg->imap);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return imap_config_read(ctx, node, enabled, &cfg->imap);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    imap_config_print(&cfg->imap, out);
}

static void section_free(struct petrel_config *cfg)
{
    imap_config_free(&cfg->imap);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return imap_server_start(s->env, &s->config->imap, s->storage, err);
}

static void stop_accepting(void *c)
{
    imap_server_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return imap_server_sessions(c);
}

static const char *address(const void *c)
{
    return imap_server_address(c);
}

static void free_component(void *c)
{
    imap_server_free(c);
}

const struct component_def component_imap = {
    .name = "imap",
    .section = "imap",
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
