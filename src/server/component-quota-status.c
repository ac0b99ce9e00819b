/* The `quota-status` component (server/component.h). */
#include "server/component.h"

#include "server/config.h"
#include "services/quota-status/quota-status-service.h"
#include "storage/quota/quota-config.h"

#include <string.h>

static void section_defaults(struct petrel_config *cfg)
{
    quota_config_defaults(&cfg->quota);
}

/* quota.quota_clone_dicts names dicts of the `dicts:` section (read
 * before the components' sections). */
static bool check_clone_dicts(const struct cfg_ctx *ctx, const struct ynode *quota,
                              const struct petrel_config *cfg)
{
    for (size_t i = 0; cfg->quota.clone_dicts[i] != NULL; i++) {
        bool found = false;
        for (size_t k = 0; k < dict_registry_count(cfg->dicts) && !found; k++)
            found = strcmp(dict_registry_name(cfg->dicts, k), cfg->quota.clone_dicts[i]) == 0;
        if (!found)
            return cfg_fail(ctx, cfg_list_item(quota, "quota_clone_dicts", i),
                            "quota.quota_clone_dicts",
                            "no dict named '%s' in dicts:", cfg->quota.clone_dicts[i]);
    }
    return true;
}

/* The `quota:` section holds the storage's quota rules too: it is read
 * whether quota-status runs or not; `enabled` makes its listener required. */
static bool section_read(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                         struct petrel_config *cfg)
{
    return quota_config_read(ctx, node, enabled, &cfg->quota) && check_clone_dicts(ctx, node, cfg);
}

static void section_print(const struct petrel_config *cfg, FILE *out)
{
    quota_config_print(&cfg->quota, out);
}

static void section_free(struct petrel_config *cfg)
{
    quota_config_free(&cfg->quota);
}

static void *start(const struct component_start *s, struct petrel_error *err)
{
    return quota_status_service_start(s->env, &s->config->quota, s->storage, err);
}

static void stop_accepting(void *c)
{
    quota_status_service_stop_accepting(c);
}

static size_t in_flight(const void *c)
{
    return quota_status_service_in_flight(c);
}

static const char *address(const void *c)
{
    return quota_status_service_address(c);
}

static void free_component(void *c)
{
    quota_status_service_free(c);
}

const struct component_def component_quota_status = {
    .name = "quota-status",
    .section = "quota",
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
