/* The `lmtp` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "protocols/lmtp/lmtp-config.h"
#include "protocols/lmtp/lmtp-server.h"

static void section_defaults(struct petrel_config *cfg)
{
    lmtp_config_defaults(&cfg->lmtp);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return lmtp_config_read(ctx, node, enabled, &cfg->lmtp);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    lmtp_config_print(&cfg->lmtp, out);
}

static void section_free(struct petrel_config *cfg)
{
    lmtp_config_free(&cfg->lmtp);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return lmtp_server_start(s->env, &s->config->lmtp, s->storage, err);
}

static void stop_accepting(void *c)
{
    lmtp_server_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return lmtp_server_sessions(c);
}

static const char *address(const void *c)
{
    return lmtp_server_address(c);
}

static void free_component(void *c)
{
    lmtp_server_free(c);
}

const struct component_def component_lmtp = {
    .name = "lmtp",
    .section = "lmtp",
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
