/* The accept path (listener.h): allow-list, per-address caps, and the pause
 * on descriptor exhaustion. */
#include "net/listener.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"

#include <errno.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* nginx's accept_mutex_delay default: long enough that a loop with no
 * descriptor left is idle, short enough that clients barely notice. */
#define RESOURCE_PAUSE_MS 500
#define RESOURCE_LOG_INTERVAL_MS 10000
#define REFUSAL_LOG_INTERVAL_MS 1000

struct net_listener {
    struct net_listener_config cfg;
    struct evconnlistener *evl;
    struct event *resume;
    char address[128];
    bool owner_enabled;
    bool resource_paused;
    uint64_t resource_pauses;
    struct net_log_limit resource_log;
    struct net_log_limit refusal_log;
    /* Copies of the names in cfg (the caller's may be on its stack). */
    char *component;
    char *allowed_key;
    char *limit_key;
    char *refuse_reply;
    char *per_ip_reply;
};

static char *dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

bool net_log_limit_pass(struct net_log_limit *ll, int64_t interval_ms, unsigned *suppressed)
{
    struct timespec now;
    now = clock_mono_now();
    int64_t since = (int64_t)(now.tv_sec - ll->last.tv_sec) * 1000 +
                    (int64_t)(now.tv_nsec - ll->last.tv_nsec) / 1000000;
    if ((ll->last.tv_sec != 0 || ll->last.tv_nsec != 0) && since < interval_ms) {
        ll->suppressed++;
        return false;
    }
    ll->last = now;
    if (suppressed != NULL)
        *suppressed = ll->suppressed;
    ll->suppressed = 0;
    return true;
}

bool net_listener_log_refusal(struct net_listener *l, unsigned *suppressed)
{
    return net_log_limit_pass(&l->refusal_log, REFUSAL_LOG_INTERVAL_MS, suppressed);
}

/* Best effort and never blocking: a refused client that does not read
 * costs nothing. */
static void refuse(evutil_socket_t fd, const char *reply)
{
    if (reply != NULL && *reply != '\0') {
        ssize_t ignored = send(fd, reply, strlen(reply), MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)ignored;
    }
    evutil_closesocket(fd);
}

static void apply_enabled(struct net_listener *l)
{
    if (l->owner_enabled && !l->resource_paused)
        evconnlistener_enable(l->evl);
    else
        evconnlistener_disable(l->evl);
}

static void accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    (void)evl;
    struct net_listener *l = arg;
    const struct net_listener_config *cfg = &l->cfg;
    struct net_accepted a = {
        .fd = fd, .peer = sa, .peer_len = socklen, .outsider = false, .tls = cfg->tls};
    bool tcp = sa->sa_family == AF_INET || sa->sa_family == AF_INET6;
    if (tcp && cfg->allowed != NULL && !cidr_list_match(cfg->allowed, sa)) {
        if (cfg->outsider_limits == NULL) {
            unsigned skipped = 0;
            if (net_listener_log_refusal(l, &skipped)) {
                char ip[64], msg[128];
                net_addr_format_ip(sa, ip, sizeof(ip));
                snprintf(msg, sizeof(msg), "connection refused: address not in %s",
                         cfg->allowed_key != NULL ? cfg->allowed_key : "allowed_nets");
                log_warn(cfg->component, msg, "peer=%s listener=%s refusals_not_logged=%u", ip,
                         l->address, skipped);
            }
            refuse(fd, cfg->tls ? NULL : cfg->refuse_reply);
            return;
        }
        a.outsider = true;
    }
    if (!conn_limits_acquire(a.outsider ? cfg->outsider_limits : cfg->limits, sa)) {
        unsigned skipped = 0;
        if (net_listener_log_refusal(l, &skipped)) {
            char ip[64], msg[128];
            net_addr_format_ip(sa, ip, sizeof(ip));
            snprintf(msg, sizeof(msg), "connection refused: %s reached",
                     a.outsider ? "the limit for addresses outside the allowed networks"
                     : cfg->limit_key != NULL ? cfg->limit_key
                                              : "max_connections_per_ip");
            log_warn(
                cfg->component, msg, "peer=%s limit=%lld refusals_not_logged=%u", ip,
                (long long)conn_limits_max_per_ip(a.outsider ? cfg->outsider_limits : cfg->limits),
                skipped);
        }
        refuse(fd, cfg->tls ? NULL : cfg->per_ip_reply);
        return;
    }
    cfg->accept(cfg->arg, l, &a);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_listener *l = arg;
    l->resource_paused = false;
    apply_enabled(l);
}

static void error_cb(struct evconnlistener *evl, void *arg)
{
    (void)evl;
    struct net_listener *l = arg;
    int e = EVUTIL_SOCKET_ERROR();
    /* libevent calls this for every error but EAGAIN, EINTR and
     * ECONNABORTED. Running out of descriptors or memory leaves the
     * connection in the backlog, so accept would fail again at once and
     * spin the loop: those pause the listener (as nginx does). Any other
     * error (EPERM from a firewall rule, EPROTO...) took its connection
     * with it: logged, and accepting goes on, so a peer that can provoke
     * one cannot stall the listener. */
    if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM) {
        unsigned skipped = 0;
        if (net_log_limit_pass(&l->resource_log, RESOURCE_LOG_INTERVAL_MS, &skipped))
            log_warn(l->cfg.component, "accept failed", "listener=%s error=\"%s\" not_logged=%u",
                     l->address, strerror(e), skipped);
        return;
    }
    l->resource_pauses++;
    l->resource_paused = true;
    apply_enabled(l);
    struct timeval tv = {0, RESOURCE_PAUSE_MS * 1000};
    evtimer_add(l->resume, &tv);
    unsigned skipped = 0;
    if (net_log_limit_pass(&l->resource_log, RESOURCE_LOG_INTERVAL_MS, &skipped)) {
        const char *msg = e == EMFILE || e == ENFILE
                              ? "accept failed: out of file descriptors, pausing the listener"
                              : "accept failed: out of memory, pausing the listener";
        log_error(l->cfg.component, msg,
                  "listener=%s error=\"%s\" pause_ms=%d pauses_not_logged=%u", l->address,
                  strerror(e), RESOURCE_PAUSE_MS, skipped);
    }
}

struct net_listener *net_listener_new(struct event_base *base, int fd,
                                      const struct net_listener_config *cfg,
                                      struct petrel_error *err)
{
    struct net_listener *l = xcalloc(1, sizeof(*l));
    l->cfg = *cfg;
    l->cfg.component = l->component = dup_or_null(cfg->component != NULL ? cfg->component : "net");
    l->cfg.allowed_key = l->allowed_key = dup_or_null(cfg->allowed_key);
    l->cfg.limit_key = l->limit_key = dup_or_null(cfg->limit_key);
    l->cfg.refuse_reply = l->refuse_reply = dup_or_null(cfg->refuse_reply);
    l->cfg.per_ip_reply = l->per_ip_reply = dup_or_null(cfg->per_ip_reply);
    l->owner_enabled = true;
    net_bound_address(fd, l->address, sizeof(l->address));
    l->evl = evconnlistener_new(base, accept_cb, l, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (l->evl == NULL) {
        close(fd);
        petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s", l->address);
        net_listener_free(l);
        return NULL;
    }
    evconnlistener_set_error_cb(l->evl, error_cb);
    l->resume = evtimer_new(base, resume_cb, l);
    return l;
}

void net_listener_free(struct net_listener *l)
{
    if (l == NULL)
        return;
    if (l->resume != NULL)
        event_free(l->resume);
    if (l->evl != NULL)
        evconnlistener_free(l->evl);
    char *copies[] = {l->component, l->allowed_key, l->limit_key, l->refuse_reply, l->per_ip_reply};
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++)
        free(copies[i]);
    free(l);
}

const char *net_listener_address(const struct net_listener *l)
{
    return l->address;
}

void net_listener_enable(struct net_listener *l, bool enabled)
{
    l->owner_enabled = enabled;
    apply_enabled(l);
}

uint64_t net_listener_resource_pauses(const struct net_listener *l)
{
    return l->resource_pauses;
}

void net_listener_refuse(struct net_listener *l, const struct net_accepted *a, const char *reply)
{
    conn_limits_release(a->outsider ? l->cfg.outsider_limits : l->cfg.limits, a->peer);
    refuse(a->fd, l->cfg.tls ? NULL : reply);
}

bool net_listener_tls(const struct net_listener *l)
{
    return l->cfg.tls;
}
