/* petrelctl backend <area> <command> ... */
#include "ctl/ctl.h"

#include <stdio.h>
#include <string.h>

/* health and version: GET /api/backend/<area>, no arguments. */
static int cmd_get(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "usage: petrelctl backend %s\n", argv[0]);
        return CTL_USAGE;
    }
    char path[64];
    snprintf(path, sizeof(path), "/api/backend/%s", argv[0]);
    return ctl_backend_call(opts, "GET", path, NULL);
}

struct area {
    const char *name;
    int (*fn)(const struct ctl_options *opts, int argc, char **argv);
    const char *usage;
};

static const struct area areas[] = {
    {"health", cmd_get, "health                 liveness of the backend-plane API"},
    {"version", cmd_get, "version                server and API version"},
    {"dict", ctl_backend_dict, "dict ...               key-value dicts (petrelctl backend dict)"},
    {"folder", ctl_backend_storage, "folder ...             list, info, guid, stats, create, delete, rename, expunge"},
    {"index", ctl_backend_storage, "index ...              dump, rebuild, optimize, cache-purge"},
    {"subscriptions", ctl_backend_storage, "subscriptions ...      list, add, remove, migrate"},
    {"specialuse", ctl_backend_storage, "specialuse ...         list, get, set, delete"},
    {"acl", ctl_backend_acl, "acl ...                get, set, delete, apply, materialise, my-rights, list-rights"},
    {"metadata", ctl_backend_metadata,
     "metadata ...           list, get, set, delete (RFC 5464 entries)"},
    {"user", ctl_backend_storage, "user ...               info, iterate, usage"},
    {"mail", ctl_backend_storage, "mail ...               append, import (mbox or maildir)"},
    {"quota", ctl_backend_quota, "quota ...              show, recalc, clone list, clone get"},
    {"who", ctl_backend_who, "who [count] ...        active sessions (from the warden)"},
};

int ctl_backend_main(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc >= 1) {
        for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++) {
            if (strcmp(argv[0], areas[i].name) == 0)
                return areas[i].fn(opts, argc, argv);
        }
        fprintf(stderr, "petrelctl: unknown backend command '%s'\n", argv[0]);
    }
    fprintf(stderr, "usage: petrelctl [options] backend <command>\ncommands:\n");
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++)
        fprintf(stderr, "  %s\n", areas[i].usage);
    return CTL_USAGE;
}
