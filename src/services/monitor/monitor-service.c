/* The monitor component (monitor-service.h): the backend registry, the
 * poll schedule of each backend, and the glue between probes, state
 * machines and the director link.
 *
 * A backend's poll starts one probe per enabled protocol at once and ends
 * when the last one reported; it fails when any failed. The next poll is
 * due `interval` after this one started (never before it ended), or
 * `rapid_interval` after it ended while the backend is in the rapid phase.
 *
 * Reports: the state machine decides; the report is remembered as
 * `pending` until the director confirms it (a RING-CHANGE or HOST line
 * with the new state). While a report is pending the director's older
 * view does not overwrite the backend's state; after a reconnect the
 * report is sent again if the handshake shows it was not applied. */
#include "services/monitor/monitor-service.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "clients/ring/ring-auth.h"
#include "services/monitor/monitor-backend-state.h"
#include "services/monitor/monitor-director-link.h"
#include "services/monitor/monitor-probe.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "monitor"
#define FAILURE_MAX 240
#define SETTLE_MS 50

struct backend {
    struct monitor_service *svc;
    char *ip;
    unsigned port;
    char *tag;
    uint32_t vhosts;
    struct sockaddr_storage addr; /* the IP; the port is set per protocol */
    socklen_t addr_len;
    struct monitor_backend_state st;
    enum monitor_report pending; /* decided, not yet confirmed by the director */
    bool pending_sent;
    bool seen; /* named by the handshake under way */
    struct event *timer;
    struct monitor_probe *probes[MONITOR_PROTO_COUNT];
    unsigned outstanding;
    bool poll_failed;
    struct timespec poll_started;
    char failure[FAILURE_MAX]; /* the last failure of the poll, for logs and the FLUSH reason */
};

struct monitor_service {
    struct event_base *base;
    const struct monitor_config *cfg;
    struct monitor_thresholds th;
    SSL_CTX *tls;
    struct smap *backends; /* ip -> struct backend */
    struct monitor_link *link;
    bool stopped;
    bool draining;        /* stopped less than a loop turn ago */
    struct event *settle; /* ends `draining` */
    bool limit_logged;
    struct readiness *readiness;
    struct metrics_registry *metrics;
    struct metric_series *probes_total[MONITOR_PROTO_COUNT][MONITOR_RESULT_COUNT];
    struct metric_series *probe_seconds[MONITOR_PROTO_COUNT];
    struct metric_series *reports_flush;
    struct metric_series *reports_up;
    struct metric_series *connected;
    struct metric_family *state_family;
};

static bool protocol_enabled(const struct monitor_config *cfg, enum monitor_protocol p)
{
    switch (p) {
    case MONITOR_PROTO_IMAP:
        return cfg->poll_imap;
    case MONITOR_PROTO_POP3:
        return cfg->poll_pop3;
    case MONITOR_PROTO_LMTP:
        return cfg->poll_lmtp;
    }
    return false;
}

/* ---------- backends ---------- */

/* The backend after *key in address order, the first when *key is NULL;
 * *key moves to it (valid while it stays in the map). */
static struct backend *next_backend(const struct monitor_service *svc, const char **key)
{
    bool strict = *key != NULL;
    return smap_seek(svc->backends, strict ? *key : "", strict, key);
}

static void cancel_poll(struct backend *b)
{
    for (size_t i = 0; i < MONITOR_PROTO_COUNT; i++) {
        monitor_probe_cancel(b->probes[i]);
        b->probes[i] = NULL;
    }
    b->outstanding = 0;
    evtimer_del(b->timer);
}

static void backend_free(void *value)
{
    struct backend *b = value;
    cancel_poll(b);
    event_free(b->timer);
    free(b->ip);
    free(b->tag);
    free(b);
}

static void schedule(struct backend *b, int64_t delay_ms)
{
    if (delay_ms < 0)
        delay_ms = 0;
    struct timeval tv = clock_ms_to_timeval(delay_ms);
    evtimer_add(b->timer, &tv);
}

static void log_backend(enum log_level level, const struct backend *b, const char *msg,
                        const char *extra)
{
    char q_tag[300], q_extra[FAILURE_MAX + 64];
    log_event(level, COMPONENT, msg, "backend=%s tag=%s%s%s", b->ip,
              log_quote(q_tag, sizeof(q_tag), b->tag), extra != NULL ? " reason=" : "",
              extra != NULL ? log_quote(q_extra, sizeof(q_extra), extra) : "");
}

/* Sends the pending report when the link is ready and it was not sent yet. */
static void try_send(struct backend *b)
{
    struct monitor_service *svc = b->svc;
    if (b->pending == MONITOR_REPORT_NONE || b->pending_sent || svc->link == NULL)
        return;
    bool flush = b->pending == MONITOR_REPORT_FLUSH;
    char reason[FAILURE_MAX + 64];
    if (flush && svc->th.rapid_rounds > 0)
        snprintf(reason, sizeof(reason), "%" PRId64 " of %" PRId64 " rapid probes failed; last: %s",
                 b->st.last_rapid_failed, svc->th.rapid_rounds, b->failure);
    else if (flush)
        snprintf(reason, sizeof(reason), "%" PRId64 " polls failed in a row; last: %s",
                 svc->th.retry_count, b->failure);
    if (!monitor_link_report(svc->link, flush, b->ip, flush ? reason : NULL))
        return; /* sent after the next handshake */
    b->pending_sent = true;
    metric_add(flush ? svc->reports_flush : svc->reports_up, 1);
    log_backend(flush ? LOG_WARN : LOG_INFO, b, flush ? "BACKEND-FLUSH sent" : "BACKEND-UP sent",
                flush ? b->failure : NULL);
}

static void poll_done(struct backend *b)
{
    struct monitor_service *svc = b->svc;
    enum monitor_state_name before = monitor_state_get(&b->st);
    enum monitor_report r = monitor_state_poll_done(&b->st, !b->poll_failed);
    enum monitor_state_name after = monitor_state_get(&b->st);
    if (after != before) {
        enum log_level level = after == MONITOR_STATE_UP ? LOG_INFO : LOG_WARN;
        char msg[64];
        snprintf(msg, sizeof(msg), "backend %s", monitor_state_label(after));
        log_backend(level, b, msg, b->poll_failed ? b->failure : NULL);
    }
    if (r != MONITOR_REPORT_NONE) {
        b->pending = r;
        b->pending_sent = false;
        try_send(b);
    }
    if (monitor_state_next_poll(&b->st) == MONITOR_POLL_RAPID)
        schedule(b, svc->cfg->rapid_interval_ms);
    else
        schedule(b, svc->cfg->interval_ms - clock_ms_since(&b->poll_started));
}

static void probe_done(const struct monitor_probe_outcome *o, void *ctx)
{
    struct backend *b = ctx;
    struct monitor_service *svc = b->svc;
    b->probes[o->proto] = NULL;
    metric_add(svc->probes_total[o->proto][o->result], 1);
    metric_observe(svc->probe_seconds[o->proto], o->seconds);
    if (o->result != MONITOR_RESULT_OK) {
        b->poll_failed = true;
        snprintf(b->failure, sizeof(b->failure), "%s %s: %s", monitor_protocol_name(o->proto),
                 monitor_result_name(o->result), o->detail);
        char q[FAILURE_MAX + 8];
        log_debug(COMPONENT, "probe failed", "backend=%s protocol=%s result=%s detail=%s", b->ip,
                  monitor_protocol_name(o->proto), monitor_result_name(o->result),
                  log_quote(q, sizeof(q), o->detail));
    }
    if (--b->outstanding == 0)
        poll_done(b);
}

static int64_t port_of(const struct monitor_config *cfg, enum monitor_protocol p)
{
    return p == MONITOR_PROTO_IMAP   ? cfg->imap_port
           : p == MONITOR_PROTO_POP3 ? cfg->pop3_port
                                     : cfg->lmtp_port;
}

static bool tls_for(const struct monitor_config *cfg, enum monitor_protocol p)
{
    return (p == MONITOR_PROTO_IMAP && cfg->imap_tls) || (p == MONITOR_PROTO_POP3 && cfg->pop3_tls);
}

static void poll_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct backend *b = arg;
    struct monitor_service *svc = b->svc;
    const struct monitor_config *cfg = svc->cfg;
    const struct monitor_credentials *cred = monitor_config_credentials(cfg, b->tag);
    b->poll_started = clock_mono_now();
    b->poll_failed = false;
    b->failure[0] = '\0';
    for (int i = 0; i < MONITOR_PROTO_COUNT; i++) {
        enum monitor_protocol p = (enum monitor_protocol)i;
        if (!protocol_enabled(cfg, p))
            continue;
        struct sockaddr_storage ss = b->addr;
        uint16_t port = htons((uint16_t)port_of(cfg, p));
        if (ss.ss_family == AF_INET)
            ((struct sockaddr_in *)&ss)->sin_port = port;
        else
            ((struct sockaddr_in6 *)&ss)->sin6_port = port;
        struct monitor_probe_params params = {
            .proto = p,
            .addr = (struct sockaddr *)&ss,
            .addr_len = b->addr_len,
            .tls = tls_for(cfg, p) ? svc->tls : NULL,
            .tls_host = b->ip,
            .user = cred != NULL ? cred->user : NULL,
            .password = cred != NULL ? cred->password : NULL,
            .timeout_ms = cfg->timeout_ms,
            .max_line = (size_t)cfg->max_line_length,
        };
        b->outstanding++;
        b->probes[p] = monitor_probe_start(svc->base, &params, probe_done, b);
    }
}

static struct backend *backend_new(struct monitor_service *svc, const struct ring_host *h)
{
    struct backend *b = xcalloc(1, sizeof(*b));
    b->svc = svc;
    b->ip = xstrdup(h->ip);
    if (inet_pton(AF_INET, h->ip, &((struct sockaddr_in *)&b->addr)->sin_addr) == 1) {
        b->addr.ss_family = AF_INET;
        b->addr_len = sizeof(struct sockaddr_in);
    } else if (inet_pton(AF_INET6, h->ip, &((struct sockaddr_in6 *)&b->addr)->sin6_addr) == 1) {
        b->addr.ss_family = AF_INET6;
        b->addr_len = sizeof(struct sockaddr_in6);
    } else {
        free(b->ip);
        free(b);
        return NULL; /* the codec checked it: cannot happen */
    }
    b->timer = evtimer_new(svc->base, poll_start, b);
    if (b->timer == NULL)
        petrel_fatal("out of memory creating a backend timer");
    monitor_state_init(&b->st, &svc->th, h->state == RING_STATE_FLUSH);
    return b;
}

static void backend_update(struct backend *b, const struct ring_host *h)
{
    b->port = h->port;
    b->vhosts = h->vhosts;
    if (b->tag == NULL || strcmp(b->tag, h->tag) != 0) {
        free(b->tag);
        b->tag = xstrdup(h->tag);
    }
}

/* The director's view of a known backend. */
static void director_state(struct backend *b, bool flushed)
{
    if (b->pending != MONITOR_REPORT_NONE) {
        if (flushed == (b->pending == MONITOR_REPORT_FLUSH)) {
            b->pending = MONITOR_REPORT_NONE; /* applied */
            b->pending_sent = false;
        }
        return; /* our report is newer than what the director says */
    }
    enum monitor_state_name before = monitor_state_get(&b->st);
    monitor_state_director(&b->st, flushed);
    if (monitor_state_get(&b->st) != before)
        log_backend(LOG_INFO, b,
                    flushed ? "director flushed the backend" : "director set the backend up", NULL);
}

/* A HOST line or an up/flush RING-CHANGE. */
static void upsert(struct monitor_service *svc, const struct ring_host *h)
{
    struct backend *b = smap_get(svc->backends, h->ip);
    if (b == NULL) {
        if (smap_count(svc->backends) >= (size_t)svc->cfg->max_backends) {
            if (!svc->limit_logged) {
                log_warn(COMPONENT, "backend limit reached, ignoring backends",
                         "max_backends=%" PRId64 " ignored=%s", svc->cfg->max_backends, h->ip);
                svc->limit_logged = true;
            }
            return;
        }
        b = backend_new(svc, h);
        if (b == NULL)
            return;
        backend_update(b, h);
        smap_put(svc->backends, b->ip, b);
        log_backend(LOG_INFO, b,
                    h->state == RING_STATE_FLUSH ? "backend added (flush)" : "backend added", NULL);
        if (!svc->stopped)
            schedule(b, 0);
    } else {
        backend_update(b, h);
        director_state(b, h->state == RING_STATE_FLUSH);
    }
    b->seen = true;
}

static void remove_backend(struct monitor_service *svc, const char *ip)
{
    struct backend *b = smap_remove(svc->backends, ip);
    if (b == NULL)
        return;
    log_backend(LOG_INFO, b, "backend removed", NULL);
    backend_free(b);
}

/* ---------- director link events ---------- */

static void on_hosts_begin(void *ctx)
{
    struct monitor_service *svc = ctx;
    const char *key = NULL;
    struct backend *b;
    while ((b = next_backend(svc, &key)) != NULL) {
        b->seen = false;
    }
    svc->limit_logged = false;
}

static void on_host(const struct ring_host *h, void *ctx)
{
    upsert(ctx, h);
}

static void on_hosts_done(void *ctx)
{
    struct monitor_service *svc = ctx;
    metric_set(svc->connected, 1);
    /* Backends the director no longer has go; pending reports go out. */
    char **gone = NULL;
    size_t gone_count = 0, gone_cap = 0;
    const char *key = NULL;
    struct backend *b;
    while ((b = next_backend(svc, &key)) != NULL) {
        if (!b->seen) {
            gone = xgrow(gone, &gone_cap, gone_count + 1, sizeof(*gone));
            gone[gone_count++] = xstrdup(b->ip);
            continue;
        }
        try_send(b);
    }
    for (size_t i = 0; i < gone_count; i++) {
        remove_backend(svc, gone[i]);
        free(gone[i]);
    }
    free(gone);
}

static void on_change(enum ring_change change, const struct ring_host *h, void *ctx)
{
    struct monitor_service *svc = ctx;
    if (change == RING_CHANGE_DOWN)
        remove_backend(svc, h->ip);
    else
        upsert(svc, h);
}

static void on_lost(void *ctx)
{
    struct monitor_service *svc = ctx;
    metric_set(svc->connected, 0);
    const char *key = NULL;
    struct backend *b;
    while ((b = next_backend(svc, &key)) != NULL) {
        b->pending_sent = false; /* unconfirmed: sent again after the next handshake */
    }
}

/* ---------- metrics and readiness ---------- */

static void collect_states(void *ctx)
{
    struct monitor_service *svc = ctx;
    metric_family_reset(svc->state_family);
    const char *key = NULL;
    struct backend *b;
    while ((b = next_backend(svc, &key)) != NULL) {
        char port[16];
        snprintf(port, sizeof(port), "%u", b->port);
        const char *values[] = {b->ip, port, b->tag != NULL ? b->tag : "",
                                monitor_state_label(monitor_state_get(&b->st))};
        metric_set(metric_series_get(svc->state_family, values), 1);
    }
}

static void register_metrics(struct monitor_service *svc, struct metrics_registry *reg)
{
    static const char *const probe_labels[] = {"protocol", "result", NULL};
    static const char *const proto_labels[] = {"protocol", NULL};
    static const char *const state_labels[] = {"ip", "port", "tag", "state", NULL};
    static const char *const report_labels[] = {"report", NULL};
    struct metric_family *total =
        metrics_counter(reg, "petrel_monitor_probes_total",
                        "Health probes of backends by protocol and result.", probe_labels);
    struct metric_family *seconds =
        metrics_histogram(reg, "petrel_monitor_probe_seconds",
                          "Duration of a health probe from the connect to its verdict.",
                          proto_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    for (int p = 0; p < MONITOR_PROTO_COUNT; p++) {
        const char *pname = monitor_protocol_name((enum monitor_protocol)p);
        for (int r = 0; r < MONITOR_RESULT_COUNT; r++) {
            const char *values[] = {pname, monitor_result_name((enum monitor_result)r)};
            svc->probes_total[p][r] = metric_series_get(total, values);
        }
        const char *pv[] = {pname};
        svc->probe_seconds[p] = metric_series_get(seconds, pv);
    }
    struct metric_family *reports = metrics_counter(
        reg, "petrel_monitor_reports_total",
        "Reports sent to the director: report is flush (BACKEND-FLUSH) or up (BACKEND-UP).",
        report_labels);
    const char *flush_v[] = {"flush"};
    const char *up_v[] = {"up"};
    svc->reports_flush = metric_series_get(reports, flush_v);
    svc->reports_up = metric_series_get(reports, up_v);
    svc->connected = metric_series_get(
        metrics_gauge(reg, "petrel_monitor_director_connected",
                      "1 while the monitor's link to the director has completed its handshake.",
                      NULL),
        NULL);
    svc->state_family = metrics_gauge(
        reg, "petrel_monitor_backend_state",
        "Always 1; state is the monitor's view of the backend: up, failing, rapid or flush.",
        state_labels);
    metrics_add_collector(reg, collect_states, svc);
    svc->metrics = reg;
}

static void readiness_probe(struct readiness_probe *probe, void *ctx)
{
    struct monitor_service *svc = ctx;
    bool ok = svc->link != NULL && monitor_link_ready(svc->link);
    readiness_probe_done(probe, ok, ok ? NULL : "no handshake with the director yet");
}

/* ---------- API ---------- */

static void settled(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct monitor_service *svc = arg;
    svc->draining = false;
}

struct monitor_service *monitor_service_start(const struct service_env *env,
                                              const struct monitor_config *cfg,
                                              struct petrel_error *err)
{
    /* The director's ring secret: without one the link says HELLO
     * anonymously, which only a director with
     * director.ring.allow_unauthenticated accepts. */
    char *secret = NULL;
    if (!ring_secret_load(cfg->director_secret_file, cfg->director_secret_env,
                          "monitor: director_secret_file", &secret, err))
        return NULL;
    struct monitor_service *svc = xcalloc(1, sizeof(*svc));
    svc->base = env->base;
    svc->cfg = cfg;
    svc->th.retry_count = cfg->retry_count;
    svc->th.rapid_rounds = cfg->rapid_rounds;
    svc->th.rapid_fails_needed = cfg->rapid_fails_needed;
    svc->th.restore_own_only = cfg->restore == MONITOR_RESTORE_OWN;
    if ((cfg->poll_imap && cfg->imap_tls) || (cfg->poll_pop3 && cfg->pop3_tls)) {
        svc->tls = monitor_probe_tls_ctx(cfg->tls_ca_file, err);
        if (svc->tls == NULL) {
            petrel_error_prefix(err, "monitor: tls_ca_file: ");
            ring_secret_free(secret);
            free(svc);
            return NULL;
        }
    }
    svc->backends = smap_new();
    svc->settle = evtimer_new(env->base, settled, svc);
    if (svc->settle == NULL)
        petrel_fatal("out of memory creating a monitor timer");
    register_metrics(svc, env->metrics);
    char host[256] = "petrel-monitor";
    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "petrel-monitor");
    host[sizeof(host) - 1] = '\0';
    struct monitor_link_options lo = {
        .addr = cfg->director_addr,
        .name = host,
        .max_line = (size_t)cfg->max_line_length,
        .reconnect_min_ms = cfg->reconnect_min_ms,
        .reconnect_max_ms = cfg->reconnect_max_ms,
        .ping_interval_ms = cfg->ping_interval_ms,
        .secret = secret,
    };
    static const struct monitor_link_events events = {
        .hosts_begin = on_hosts_begin,
        .host = on_host,
        .hosts_done = on_hosts_done,
        .change = on_change,
        .lost = on_lost,
    };
    svc->link = monitor_link_new(env->base, &lo, &events, svc, err);
    if (secret[0] == '\0')
        log_warn(COMPONENT, "director link not authenticated",
                 "hint=\"set director_secret_file (or %s / %s_FILE); only a director with "
                 "director.ring.allow_unauthenticated accepts this monitor\"",
                 cfg->director_secret_env, cfg->director_secret_env);
    ring_secret_free(secret);
    if (svc->link == NULL) {
        petrel_error_prefix(err, "monitor: director_addr: ");
        monitor_service_free(svc);
        return NULL;
    }
    if (env->readiness != NULL) {
        svc->readiness = env->readiness;
        readiness_add_probe(env->readiness, "monitor-director", readiness_probe, svc);
    }
    char q_addr[256];
    log_info(COMPONENT, "monitor started",
             "director=%s imap=%s pop3=%s lmtp=%s interval_ms=%" PRId64 " timeout_ms=%" PRId64
             " retry_count=%" PRId64 " rapid_rounds=%" PRId64 " rapid_fails_needed=%" PRId64,
             log_quote(q_addr, sizeof(q_addr), cfg->director_addr),
             cfg->poll_imap ? (cfg->imap_tls ? "tls" : "plain") : "off",
             cfg->poll_pop3 ? (cfg->pop3_tls ? "tls" : "plain") : "off",
             cfg->poll_lmtp ? "plain" : "off", cfg->interval_ms, cfg->timeout_ms, cfg->retry_count,
             cfg->rapid_rounds, cfg->rapid_fails_needed);
    return svc;
}

void monitor_service_stop(struct monitor_service *svc)
{
    if (svc == NULL || svc->stopped)
        return;
    svc->stopped = true;
    /* Connections just closed may still have deferred libevent callbacks
     * queued, holding their memory until the loop runs them: the process
     * should turn the loop a little longer before it exits. */
    svc->draining = true;
    struct timeval tv = {0, SETTLE_MS * 1000};
    evtimer_add(svc->settle, &tv);
    monitor_link_free(svc->link);
    svc->link = NULL;
    metric_set(svc->connected, 0);
    const char *key = NULL;
    struct backend *b;
    while ((b = next_backend(svc, &key)) != NULL) {
        cancel_poll(b);
    }
}

const char *monitor_service_director(const struct monitor_service *svc)
{
    return svc->cfg->director_addr;
}

size_t monitor_service_in_flight(const struct monitor_service *svc)
{
    return svc->draining ? 1 : 0;
}

size_t monitor_service_backends(const struct monitor_service *svc)
{
    return smap_count(svc->backends);
}

void monitor_service_free(struct monitor_service *svc)
{
    if (svc == NULL)
        return;
    monitor_service_stop(svc);
    if (svc->metrics != NULL)
        metrics_remove_collector(svc->metrics, collect_states, svc);
    smap_free(svc->backends, backend_free);
    if (svc->settle != NULL)
        event_free(svc->settle);
    if (svc->tls != NULL)
        SSL_CTX_free(svc->tls);
    free(svc);
}
