/* Listeners (TCP and Unix sockets), the session list, the delivery threads
 * and the metrics of the LMTP server.
 *
 * Deliveries run on a worker pool (core/worker-pool.h): a delivery blocks
 * on fsync, and the event loop must keep serving other connections
 * meanwhile. Each delivery thread owns a mail storage of its own (created
 * here, used only by that thread, freed after the threads are joined), so
 * nothing in the storage is shared between threads; deliveries to one
 * folder from two threads serialise on the folder lock as two processes'
 * would. Deliveries from different connections run in parallel, and their
 * fsyncs reach the file system together: ext4 commits them in one journal
 * transaction (the "group commit" the performance section measures).
 *
 * Each thread also keeps recently used folders open (lmtp-folder-cache.h)
 * under its share of lmtp.folder_cache_bytes. A timer on the loop closes
 * the ones unused for lmtp.folder_cache_idle: it takes the thread's lock
 * (held by the thread for the whole of each delivery) with a trylock, so a
 * busy thread is skipped, never waited for, and the storage is still used
 * by one thread at a time. */
#include "protocols/lmtp/lmtp-server.h"

#include "core/dlist.h"
#include "core/log.h"
#include "core/worker-pool.h"
#include "core/xalloc.h"
#include "net/conn-limits.h"
#include "net/conn-slots.h"
#include "net/listener-set.h"
#include "net/sockaddr.h"
#include "net/tls.h"
#include "protocols/lmtp/lmtp-private.h"
#include "storage/quota/quota-module.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct lmtp_job {
    struct lmtp_server *srv;
    struct lmtp_session *session; /* NULL once the session is gone */
    struct lmtp_delivery *d;
};

struct lmtp_server {
    struct lmtp_server_ctx ctx;
    struct net_listener_set *listeners;
    struct conn_slots *slots; /* max_connections, given back when a session is gone */
    /* max_connections_per_ip, given back likewise */
    struct conn_limits *per_ip;
    struct cidr_list allowed;
    struct cidr_list trusted; /* login_trusted_networks */
    struct lmtp_session *sessions;
    unsigned long long session_ids;
    struct worker_pool *pool;
    struct mail_storage **storages;     /* one per delivery thread */
    struct lmtp_folder_cache **folders; /* one per delivery thread, on its storage */
    pthread_mutex_t *thread_locks;      /* one per delivery thread: its storage and folders */
    size_t storage_count;
    struct event *folder_sweep; /* closes folders unused for folder_cache_idle */
    /* A front's petrel_lmtp_* (not exported). */
    struct metrics_registry *own_metrics;
    /* "lmtp" or "login.lmtp": the keys named in refusals. */
    char key_prefix[32];
    char allowed_key[64];
    char limit_key[64];
};

bool lmtp_server_peer_trusted(const struct lmtp_server *srv, const struct sockaddr *peer)
{
    return peer->sa_family != AF_UNIX && cidr_list_match(&srv->trusted, peer);
}

const struct lmtp_server_ctx *lmtp_server_context(const struct lmtp_server *srv)
{
    return &srv->ctx;
}

unsigned long long lmtp_server_next_session_id(struct lmtp_server *srv)
{
    return ++srv->session_ids;
}

void lmtp_server_session_added(struct lmtp_server *srv, struct lmtp_session *s)
{
    s->next = srv->sessions;
    if (srv->sessions != NULL)
        srv->sessions->prev = s;
    srv->sessions = s;
    metric_add(srv->ctx.m.connections_total, 1);
    metric_gauge_add(srv->ctx.m.sessions, 1);
}

void lmtp_server_session_gone(struct lmtp_server *srv, struct lmtp_session *s)
{
    DLIST_UNLINK(srv->sessions, s);
    conn_slots_release(srv->slots);
    conn_limits_release(srv->per_ip, (const struct sockaddr *)&s->peer_addr);
    metric_gauge_add(srv->ctx.m.sessions, -1);
}

/* ---------- deliveries ---------- */

static void job_work(void *arg, unsigned worker_index)
{
    struct lmtp_job *job = arg;
    struct lmtp_server *srv = job->srv;
    pthread_mutex_lock(&srv->thread_locks[worker_index]);
    lmtp_deliver(srv->storages[worker_index], srv->folders[worker_index], job->d);
    pthread_mutex_unlock(&srv->thread_locks[worker_index]);
}

static void folder_sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lmtp_server *srv = arg;
    for (size_t i = 0; i < srv->storage_count; i++) {
        if (pthread_mutex_trylock(&srv->thread_locks[i]) != 0)
            continue; /* delivering: its folders are in use */
        lmtp_folder_cache_expire(srv->folders[i], srv->ctx.cfg->folder_cache_idle_ms);
        pthread_mutex_unlock(&srv->thread_locks[i]);
    }
}

static void folder_sweep_start(struct lmtp_server *srv)
{
    /* Twice per idle period: a folder stays open at most 1.5 periods unused. */
    int64_t every = srv->ctx.cfg->folder_cache_idle_ms / 2;
    struct timeval tv = {.tv_sec = every / 1000, .tv_usec = (every % 1000) * 1000};
    srv->folder_sweep = event_new(srv->ctx.base, -1, EV_PERSIST, folder_sweep_cb, srv);
    event_add(srv->folder_sweep, &tv);
}

static void job_account(struct lmtp_server *srv, const struct lmtp_delivery *d,
                        const char *session_id)
{
    static const char *const ok[] = {"ok"}, *const tempfail[] = {"tempfail"},
                             *const permfail[] = {"permfail"};
    for (size_t i = 0; i < d->rcpt_count; i++) {
        const struct lmtp_delivery_rcpt *r = &d->rcpts[i];
        char addr[300];
        char user[300];
        log_quote(addr, sizeof(addr), r->address);
        log_quote(user, sizeof(user), r->username);
        const char *const *result = tempfail;
        if (r->ok)
            result = ok;
        else if (lmtp_delivery_permanent(&r->err))
            result = permfail;
        metric_add(metric_series_get(srv->ctx.m.deliveries, result), 1);
        metric_observe(srv->ctx.m.delivery_seconds, r->seconds);
        if (r->ok) {
            char folder[300];
            log_quote(folder, sizeof(folder), r->folder);
            log_info(LMTP_COMPONENT, "delivered",
                     "session=%s rcpt=%s user=%s folder=%s uid=%u size=%zu ms=%.1f", session_id,
                     addr, user, folder, r->uid, d->len, r->seconds * 1000);
        } else {
            char why[600];
            log_quote(why, sizeof(why), r->err.message);
            log_warn(LMTP_COMPONENT, "delivery failed",
                     "session=%s rcpt=%s user=%s code=%s error=%s ms=%.1f", session_id, addr, user,
                     petrel_error_code_name(r->err.code), why, r->seconds * 1000);
        }
    }
}

static void job_done(void *arg, bool cancelled)
{
    struct lmtp_job *job = arg;
    struct lmtp_delivery *d = job->d;
    if (cancelled) {
        for (size_t i = 0; i < d->rcpt_count; i++)
            petrel_error_set(&d->rcpts[i].err, PETREL_ERR_UNAVAILABLE, "server shutting down");
    } else {
        job_account(job->srv, d, job->session != NULL ? job->session->id : "-");
    }
    if (job->session != NULL) {
        job->session->job = NULL;
        lmtp_session_delivered(job->session, d);
    }
    lmtp_delivery_free(d);
    free(job);
}

bool lmtp_server_submit(struct lmtp_server *srv, struct lmtp_session *s, struct lmtp_delivery *d)
{
    struct lmtp_job *job = xcalloc(1, sizeof(*job));
    job->srv = srv;
    job->session = s;
    job->d = d;
    if (!worker_pool_submit(srv->pool, job, job_work, job_done)) {
        free(job);
        return false;
    }
    s->job = job;
    return true;
}

void lmtp_server_detach_job(struct lmtp_job *job)
{
    if (job != NULL)
        job->session = NULL;
}

/* ---------- listeners ---------- */

/* Past net/listener.h's allow-list check (a refused client got 554). */
static void accept_cb(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    struct lmtp_server *srv = arg;
    evutil_socket_t fd = a->fd;
    const struct sockaddr *sa = a->peer;
    if (!conn_slots_admit(srv->slots, l, a))
        return;
    struct bufferevent *bev = bufferevent_socket_new(srv->ctx.base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        conn_slots_release(srv->slots);
        net_listener_refuse(l, a, NULL);
        return;
    }
    lmtp_session_start(srv, bev, sa);
}

static bool listen_on(struct lmtp_server *srv, const char *addr, struct petrel_error *err)
{
    char refuse[320], per_ip[352], per_ip_key[64];
    snprintf(refuse, sizeof(refuse), "554 5.7.1 %s Access denied\r\n", srv->ctx.hostname);
    snprintf(per_ip, sizeof(per_ip),
             "421 4.7.0 %s Too many connections from your address, try again later\r\n",
             srv->ctx.hostname);
    snprintf(per_ip_key, sizeof(per_ip_key), "%s.max_connections_per_ip", srv->key_prefix);
    struct net_listener_config lcfg = {
        .component = srv->ctx.component,
        .allowed_key = srv->allowed_key,
        .limit_key = per_ip_key,
        .limits = srv->per_ip,
        .per_ip_reply = per_ip,
        .allowed = srv->allowed.count > 0 ? &srv->allowed : NULL,
        .refuse_reply = refuse,
        .accept = accept_cb,
        .arg = srv,
    };
    return net_listener_set_listen(srv->listeners, addr, (unsigned)srv->ctx.cfg->socket_mode, &lcfg,
                                   err);
}

/* ---------- life cycle ---------- */

static void metrics_init(struct lmtp_server *srv, struct metrics_registry *reg)
{
    static const char *const dir_labels[] = {"direction", NULL};
    static const char *const result_labels[] = {"result", NULL};
    struct lmtp_server_metrics *m = &srv->ctx.m;
    m->sessions = metric_series_get(
        metrics_gauge(reg, "petrel_lmtp_sessions", "Open LMTP sessions.", NULL), NULL);
    m->connections_total = metric_series_get(
        metrics_counter(reg, "petrel_lmtp_connections_total", "LMTP connections accepted.", NULL),
        NULL);
    struct metric_family *bytes = metrics_counter(
        reg, "petrel_lmtp_bytes_total", "Bytes received and sent by the LMTP server.", dir_labels);
    const char *in[] = {"in"}, *out[] = {"out"};
    m->bytes_in = metric_series_get(bytes, in);
    m->bytes_out = metric_series_get(bytes, out);
    m->deliveries = metrics_counter(reg, "petrel_lmtp_deliveries_total",
                                    "Messages delivered to one recipient, by result: ok (250), "
                                    "tempfail (451, nothing stored), permfail (5xx after DATA).",
                                    result_labels);
    m->delivery_seconds = metric_series_get(
        metrics_histogram(reg, "petrel_lmtp_delivery_seconds",
                          "Time to store a message for one recipient (durable per mail.fsync), "
                          "in seconds.",
                          NULL, metrics_latency_buckets, metrics_latency_bucket_count),
        NULL);
    m->recipients = metrics_counter(reg, "petrel_lmtp_recipients_total",
                                    "RCPT TO answers by result: accepted, unknown (550), "
                                    "tempfail (451), rejected (other 5xx).",
                                    result_labels);
    /* Every series exists from the start, so a rate shows 0, not nothing. */
    static const char *const results[] = {"ok", "tempfail", "permfail"};
    for (size_t i = 0; i < 3; i++)
        metric_series_get(m->deliveries, &results[i]);
    static const char *const rcpt_results[] = {"accepted", "unknown", "tempfail", "rejected"};
    for (size_t i = 0; i < 4; i++)
        metric_series_get(m->recipients, &rcpt_results[i]);
}

static struct lmtp_server *server_new(const struct service_env *env, const struct lmtp_config *cfg,
                                      const char *component, const char *key_prefix,
                                      struct petrel_error *err)
{
    struct lmtp_server *srv = xcalloc(1, sizeof(*srv));
    srv->ctx.cfg = cfg;
    srv->ctx.component = component;
    srv->ctx.base = env->base;
    snprintf(srv->key_prefix, sizeof(srv->key_prefix), "%s", key_prefix);
    snprintf(srv->allowed_key, sizeof(srv->allowed_key), "%s.allowed_nets", key_prefix);
    snprintf(srv->limit_key, sizeof(srv->limit_key), "%s.max_connections", key_prefix);
    if (cfg->hostname != NULL && *cfg->hostname != '\0')
        snprintf(srv->ctx.hostname, sizeof(srv->ctx.hostname), "%s", cfg->hostname);
    else if (gethostname(srv->ctx.hostname, sizeof(srv->ctx.hostname) - 1) != 0 ||
             srv->ctx.hostname[0] == '\0')
        snprintf(srv->ctx.hostname, sizeof(srv->ctx.hostname), "localhost");
    srv->listeners = net_listener_set_new(env->base);
    char busy[320];
    snprintf(busy, sizeof(busy), "421 4.3.2 %s Too many connections, try again later\r\n",
             srv->ctx.hostname);
    struct conn_slots_config sc = {
        .max = (size_t)cfg->max_connections,
        .full = CONN_SLOTS_REFUSE,
        .component = component,
        .limit_key = srv->limit_key,
        .busy_reply = busy,
    };
    srv->slots = conn_slots_new(&sc);
    struct conn_limits_config lc = {.max_per_ip = cfg->max_connections_per_ip};
    srv->per_ip = conn_limits_new(&lc);
    if (!cidr_list_parse((const char *const *)cfg->allowed_nets, &srv->allowed, err) ||
        !cidr_list_parse((const char *const *)cfg->login_trusted_networks, &srv->trusted, err))
        return srv;
    if (cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0') {
        struct tls_server_options topts = {
            .cert_file = cfg->tls_cert_file,
            .key_file = cfg->tls_key_file,
        };
        srv->ctx.tls = tls_server_ctx_new(&topts, err);
        if (srv->ctx.tls == NULL)
            return srv;
    }
    srv->ctx.auth = auth_client_new(env->base, cfg->auth_addr, cfg->auth_timeout_ms, err);
    return srv;
}

static bool server_listen(struct lmtp_server *srv, const struct service_env *env,
                          struct petrel_error *err)
{
    const struct lmtp_config *cfg = srv->ctx.cfg;
    for (size_t i = 0; cfg->listen != NULL && cfg->listen[i] != NULL; i++) {
        if (!listen_on(srv, cfg->listen[i], err))
            return false;
    }
    if (net_listener_set_count(srv->listeners) == 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "%s: no listener configured", srv->key_prefix);
        return false;
    }
    net_listener_set_add_readiness(srv->listeners, env->readiness, srv->ctx.component);
    return true;
}

struct lmtp_server *lmtp_server_start(const struct service_env *env, const struct lmtp_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err)
{
    struct lmtp_server *srv = server_new(env, cfg, LMTP_COMPONENT, "lmtp", err);
    metrics_init(srv, env->metrics);
    if (srv->ctx.auth == NULL)
        goto fail;
    srv->ctx.quota_rules = quota_storage_enforces(storage);
    srv->storage_count = (size_t)cfg->delivery_threads;
    srv->storages = xcalloc(srv->storage_count, sizeof(*srv->storages));
    srv->folders = xcalloc(srv->storage_count, sizeof(*srv->folders));
    srv->thread_locks = xcalloc(srv->storage_count, sizeof(*srv->thread_locks));
    /* Each thread's share of the budget: the same folder may be open in
     * several threads, so the budget bounds the sum, not distinct folders. */
    size_t share = (size_t)cfg->folder_cache_bytes / srv->storage_count;
    for (size_t i = 0; i < srv->storage_count; i++) {
        /* No metrics registry: the registry belongs to the loop thread. */
        srv->storages[i] = mail_storage_new_sibling(storage, NULL);
        srv->folders[i] = lmtp_folder_cache_new(LMTP_OPEN_FOLDERS_PER_THREAD, share);
        pthread_mutex_init(&srv->thread_locks[i], NULL);
    }
    folder_sweep_start(srv);
    srv->pool =
        worker_pool_new(env->base, (unsigned)cfg->delivery_threads, (size_t)cfg->delivery_queue);
    if (srv->pool == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "lmtp: cannot start %lld delivery threads",
                         (long long)cfg->delivery_threads);
        goto fail;
    }
    if (!server_listen(srv, env, err))
        goto fail;
    log_info(LMTP_COMPONENT, "listening",
             "address=%s listeners=%zu starttls=%s auth=%s delivery_threads=%lld",
             net_listener_set_address(srv->listeners, 0), net_listener_set_count(srv->listeners),
             srv->ctx.tls != NULL ? "on" : "off", cfg->auth_addr, (long long)cfg->delivery_threads);
    return srv;
fail:
    lmtp_server_free(srv);
    return NULL;
}

struct lmtp_server *lmtp_server_start_front(const struct service_env *env,
                                            const struct lmtp_config *cfg,
                                            const struct lmtp_front_ops *ops, void *arg,
                                            const char *component, struct petrel_error *err)
{
    struct lmtp_server *srv = server_new(env, cfg, component, "login.lmtp", err);
    srv->ctx.front = ops;
    srv->ctx.front_arg = arg;
    /* The sessions count into registry series of their own: a process
     * running the lmtp component too shows only real deliveries there. */
    srv->own_metrics = metrics_registry_new();
    metrics_init(srv, srv->own_metrics);
    if (srv->ctx.auth == NULL || !server_listen(srv, env, err)) {
        lmtp_server_free(srv);
        return NULL;
    }
    return srv;
}

const char *lmtp_server_address(const struct lmtp_server *srv)
{
    return net_listener_set_address(srv->listeners, 0);
}

void lmtp_server_stop_accepting(struct lmtp_server *srv)
{
    net_listener_set_stop(srv->listeners);
    struct lmtp_session *s = srv->sessions;
    while (s != NULL) {
        struct lmtp_session *next = s->next;
        lmtp_session_shutdown(s);
        s = next;
    }
}

size_t lmtp_server_sessions(const struct lmtp_server *srv)
{
    return conn_slots_used(srv->slots); /* a slot per session */
}

void lmtp_server_free(struct lmtp_server *srv)
{
    if (srv == NULL)
        return;
    net_listener_set_free(srv->listeners); /* no accept while sessions go */
    srv->listeners = NULL;
    while (srv->sessions != NULL)
        lmtp_session_free(srv->sessions);
    /* Deliveries still running finish (their files are complete and durable
     * or removed); their sessions are gone, so nobody is answered. */
    if (srv->pool != NULL)
        worker_pool_free(srv->pool);
    if (srv->folder_sweep != NULL)
        event_free(srv->folder_sweep);
    for (size_t i = 0; i < srv->storage_count; i++) {
        /* The kept folders hold references to their storage's users. */
        if (srv->folders != NULL)
            lmtp_folder_cache_free(srv->folders[i]);
        mail_storage_free(srv->storages[i]);
        if (srv->thread_locks != NULL)
            pthread_mutex_destroy(&srv->thread_locks[i]);
    }
    free(srv->thread_locks);
    free(srv->folders);
    free(srv->storages);
    auth_client_free(srv->ctx.auth);
    if (srv->ctx.tls != NULL)
        SSL_CTX_free(srv->ctx.tls);
    cidr_list_free(&srv->allowed);
    cidr_list_free(&srv->trusted);
    conn_slots_free(srv->slots);
    conn_limits_free(srv->per_ip);
    if (srv->own_metrics != NULL)
        metrics_registry_free(srv->own_metrics);
    free(srv);
}
