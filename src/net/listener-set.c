/* A server's listeners, paused and stopped together (listener-set.h). */
#include "net/listener-set.h"

#include "core/fs-util.h"
#include "core/xalloc.h"
#include "net/readiness.h"
#include "net/sockaddr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct set_entry {
    struct net_listener *nl; /* NULL once stopped */
    char address[128];
    bool tls;
};

struct net_listener_set {
    struct event_base *base;
    struct set_entry *entries;
    size_t count;
    size_t cap;
    bool paused;
    bool stopped;
};

struct net_listener_set *net_listener_set_new(struct event_base *base)
{
    struct net_listener_set *set = xcalloc(1, sizeof(*set));
    set->base = base;
    return set;
}

void net_listener_set_free(struct net_listener_set *set)
{
    if (set != NULL) {
        net_listener_set_stop(set);
        free(set->entries);
        free(set);
    }
}

static bool prepare_unix_dir(const char *path, struct petrel_error *err)
{
    /* "unix:./var/lmtp.sock": the directory may not exist yet. */
    char *dir = fs_dirname(path);
    bool ok = fs_mkdir_p(dir, 0755, err);
    free(dir);
    return ok;
}

bool net_listener_set_listen(struct net_listener_set *set, const char *addr, unsigned socket_mode,
                             const struct net_listener_config *cfg, struct petrel_error *err)
{
    bool is_unix = strncmp(addr, "unix:", 5) == 0;
    if (is_unix && !prepare_unix_dir(addr + 5, err))
        return false;
    int fd = net_listen(addr, false, err);
    if (fd < 0)
        return false;
    if (is_unix && socket_mode != 0 && chmod(addr + 5, (mode_t)socket_mode) != 0) {
        int e = errno;
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot set the mode of %s: %s", addr + 5,
                                strerror(e));
    }
    struct net_listener *nl = net_listener_new(set->base, fd, cfg, err);
    if (nl == NULL)
        return false;
    set->entries = xgrow(set->entries, &set->cap, set->count + 1, sizeof(*set->entries));
    struct set_entry *e = &set->entries[set->count++];
    e->nl = nl;
    e->tls = cfg->tls;
    snprintf(e->address, sizeof(e->address), "%s", net_listener_address(nl));
    if (set->paused)
        net_listener_set_enabled(set, false);
    return true;
}

size_t net_listener_set_count(const struct net_listener_set *set)
{
    return set->count;
}

const char *net_listener_set_address(const struct net_listener_set *set, size_t i)
{
    return i < set->count ? set->entries[i].address : "";
}

bool net_listener_set_tls(const struct net_listener_set *set, size_t i)
{
    return i < set->count && set->entries[i].tls;
}

void net_listener_set_enabled(struct net_listener_set *set, bool enabled)
{
    set->paused = !enabled;
    for (size_t i = 0; i < set->count; i++) {
        if (set->entries[i].nl != NULL)
            net_listener_enable(set->entries[i].nl, enabled);
    }
}

bool net_listener_set_paused(const struct net_listener_set *set)
{
    return set->paused;
}

void net_listener_set_stop(struct net_listener_set *set)
{
    set->stopped = true;
    for (size_t i = 0; i < set->count; i++) {
        net_listener_free(set->entries[i].nl);
        set->entries[i].nl = NULL;
    }
}

bool net_listener_set_stopped(const struct net_listener_set *set)
{
    return set->stopped;
}

void net_listener_set_add_readiness(const struct net_listener_set *set, struct readiness *r,
                                    const char *name)
{
    for (size_t i = 0; i < set->count; i++) {
        char probe[96];
        snprintf(probe, sizeof(probe), "%s-listener-%zu", name, i);
        readiness_add_tcp(r, probe, set->entries[i].address, set->entries[i].tls, NULL, NULL);
    }
}
