/* The `monitor` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "services/monitor/monitor-config.h"
#include "services/monitor/monitor-service.h"

static void section_defaults(struct petrel_config *cfg)
{
    monitor_config_defaults(&cfg->monitor);
}

static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    (void)enabled;
    return monitor_section_read(ctx, node, &cfg->monitor);
}

/* The monitor's own file (MONITOR_CONFIG, monitor.config_file), read once
 * the component list is final. */
static bool section_finish(struct petrel_config *cfg, struct petrel_error *err)
{
    return monitor_config_load(&cfg->monitor, err);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    monitor_config_print(&cfg->monitor, out);
}

static void section_free(struct petrel_config *cfg)
{
    monitor_config_free(&cfg->monitor);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return monitor_service_start(s->env, &s->config->monitor, err);
}

static void stop_accepting(void *c)
{
    monitor_service_stop(c);
}

static size_t in_flight(const void *c)
{
    return monitor_service_in_flight(c);
}

static void free_component(void *c)
{
    monitor_service_free(c);
}

const struct component_def component_monitor = {
    .name = "monitor",
    .section = "monitor",
    .config_defaults = section_defaults,
    .config_read = section_read,
    .config_finish = section_finish,
    .config_print = section_print,
    .config_free = section_free,
    .start = start,
    .stop_accepting = stop_accepting,
    .in_flight = in_flight,
    .free = free_component,
};
