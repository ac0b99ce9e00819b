/* petrelctl backend quota show|recalc|clone list|clone get (document 3's
 * quota endpoints of the backend-plane API). */
#include "ctl/ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUOTA_USAGE                                                                                \
    "usage: petrelctl backend quota show <user>\n"                                                 \
    "       petrelctl backend quota recalc <user>\n"                                               \
    "       petrelctl backend quota clone list\n"                                                  \
    "       petrelctl backend quota clone get <backend> <user>\n"

static int show(const struct ctl_options *opts, const char *user)
{
    char *u = ctl_escape(user);
    size_t n = strlen(u) + 64;
    char *path = malloc(n);
    snprintf(path, n, "/api/backend/quota/show?user=%s", u);
    int rc = ctl_backend_call(opts, "GET", path, NULL);
    free(path);
    free(u);
    return rc;
}

static int recalc(const struct ctl_options *opts, const char *user)
{
    return ctl_backend_post(opts, "/api/backend/quota/recalc", json_pack("{s:s}", "user", user));
}

static int clone_get(const struct ctl_options *opts, const char *backend, const char *user)
{
    char *b = ctl_escape(backend);
    char *u = ctl_escape(user);
    size_t n = strlen(b) + strlen(u) + 64;
    char *path = malloc(n);
    snprintf(path, n, "/api/backend/quota/clone/get?backend=%s&user=%s", b, u);
    int rc = ctl_backend_call(opts, "GET", path, NULL);
    free(path);
    free(b);
    free(u);
    return rc;
}

int ctl_backend_quota(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "show") == 0)
        return show(opts, argv[2]);
    if (argc == 3 && strcmp(argv[1], "recalc") == 0)
        return recalc(opts, argv[2]);
    if (argc == 3 && strcmp(argv[1], "clone") == 0 && strcmp(argv[2], "list") == 0)
        return ctl_backend_call(opts, "GET", "/api/backend/quota/clone/list", NULL);
    if (argc == 5 && strcmp(argv[1], "clone") == 0 && strcmp(argv[2], "get") == 0)
        return clone_get(opts, argv[3], argv[4]);
    fputs(QUOTA_USAGE, stderr);
    return CTL_USAGE;
}
