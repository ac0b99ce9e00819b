/* The components petreld can run (`components:` in petrel.yaml), behind one
 * table. Each component is defined once, in components.c, by a struct
 * component_def: its name, its configuration section
 * (defaults, read, print, free, and a last step once the component list is
 * final) and its life in the daemon (start, stop accepting, work in flight,
 * abandon at the shutdown timeout, address, free). The configuration reader
 * and the daemon loop over the table, so adding a component is its own
 * files plus its definition and table line in components.c (and its
 * section's field in struct petrel_config).
 *
 * Order: the table's order is the start order (auth before the front ends
 * that ask it, the backend-plane API last so that everything it reports on
 * exists); stopping and freeing go in the reverse order. */
#ifndef PETREL_SERVER_COMPONENT_H
#define PETREL_SERVER_COMPONENT_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "net/service-env.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct petrel_config;
struct mail_storage;
struct dict_registry;

/* What the daemon gives a component to start with. All borrowed; they
 * outlive the component. */
struct component_start {
    const struct service_env *env;
    struct petrel_config *config;
    struct mail_storage *storage;
    struct dict_registry *dicts; /* the daemon's, made from config->dicts */
};

struct component_def {
    const char *name;    /* as listed in `components:` */
    const char *section; /* its YAML section ("warden_service"), NULL: none */

    /* Configuration, on the component's part of `cfg`. read: `node` is the
     * section (NULL when absent), `enabled` whether the component is
     * listed (a listed component may require keys). finish (may be NULL):
     * runs for an enabled component once the list is final (after
     * --component), for what depends on it (a file of its own). */
    void (*config_defaults)(struct petrel_config *cfg);
    bool (*config_read)(const struct cfg_ctx *ctx, const struct ynode *node, bool enabled,
                        struct petrel_config *cfg);
    bool (*config_finish)(struct petrel_config *cfg, struct petrel_error *err);
    void (*config_print)(const struct petrel_config *cfg, FILE *out);
    void (*config_free)(struct petrel_config *cfg);

    /* Life. start: listeners bound, NULL with `err` on failure.
     * stop_accepting: listeners closed, open work may finish. in_flight
     * (may be NULL: none): work the drain waits for. abandon (may be
     * NULL): the shutdown timeout passed, tell the clients still waiting.
     * address: the first listener ("off" is never returned). */
    void *(*start)(const struct component_start *s, struct petrel_error *err);
    void (*stop_accepting)(void *c);
    size_t (*in_flight)(const void *c);
    void (*abandon)(void *c);
    const char *(*address)(const void *c);
    void (*free)(void *c);
};

/* The table, in start order, NULL-terminated; at most COMPONENT_TABLE_MAX. */
#define COMPONENT_TABLE_MAX 32
extern const struct component_def *const component_table[];

/* How many entries the table has. */
size_t component_count(void);
/* The definition named `name`, or NULL. */
const struct component_def *component_find(const char *name);

#endif
