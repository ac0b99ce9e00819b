/* The auth service: request dispatch, the cache fast path, failed-login
 * delays and metrics, on the line-protocol server core (net/line-server.h:
 * listeners, allowed_nets, connections, line reading). Lookups and hashing run in
 * auth_job_run() on the worker pool; everything else runs on the loop. */
#include "services/auth/auth-service.h"

#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/worker-pool.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/line-server.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"
#include "clients/auth/auth-protocol.h"
#include "clients/auth/auth-sasl.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#define COMPONENT "auth"
#define REASON_FAILED "authentication failed"
#define REASON_TEMP "temporary authentication failure"
#define REASON_LIMITED "too many failed logins, try again later"

enum auth_verb { VERB_VERIFY, VERB_AUTH, VERB_USER, VERB_ITERATE, VERB_COUNT };
static const char *const verb_names[VERB_COUNT] = {"VERIFY", "AUTH", "USER", "ITERATE"};

enum req_result {
    RESULT_OK,
    RESULT_FAIL,
    RESULT_NOT_FOUND,
    RESULT_ERROR,
    RESULT_LIMITED,
    RESULT_COUNT
};
static const char *const result_names[RESULT_COUNT] = {"ok", "fail", "not_found", "error",
                                                       "limited"};

/* Where a request stands; decides what closing its connection does. */
enum req_state {
    REQ_ACTIVE,    /* being handled on the loop right now */
    REQ_SASL_WAIT, /* waiting for the client's next SASL response */
    REQ_PENALTY,   /* asking the penalty store */
    REQ_DELAYED,   /* timer: penalty wait before processing, or failure delay */
    REQ_WORKER,    /* queued or running on the worker pool */
    REQ_WAITING,   /* its IP or user is at the limit with attempts being checked */
};

struct auth_conn;

struct auth_req {
    struct auth_service *svc;
    struct auth_conn *conn; /* NULL once the connection has gone */
    struct auth_req *next;
    struct auth_req *prev;
    enum auth_verb verb;
    enum req_state state;
    char id[AUTH_ID_MAX + 1];
    char *username;
    char *password; /* wiped before free */
    char *service;
    char *ip;
    char *ip_key; /* what ip's failures are counted under (penalty_ip_key()) */
    struct sasl_exchange sasl;
    struct timespec started;
    int64_t check_started_us; /* login_process(): the failure delay counts from here */
    bool trusted_ip;          /* ip is in auth.trusted_networks: no per-IP penalty */
    unsigned ip_failures;     /* the IP's failures when the attempt was admitted */
    char *user_key;           /* "user:<name>": the user's count in the penalty store */
    bool reserved;            /* holds a slot in the in-flight counts (admit()) */
    bool ip_watch;            /* holds a reference in svc->ip_failed_here (ip_failures_fresh()) */
    uint64_t ip_failed_mark;  /* that entry's count when ip_failures was answered */
    struct auth_req *wait_next; /* REQ_WAITING: the service's wait list */
    struct auth_req *wait_prev;
    struct event *timer;
    bool replied_in_timer; /* the timer sends the prepared failure reply */
    /* Filled on the worker; read on the loop after `done`. */
    enum auth_db_status status;
    struct userdb_entry *entry;
    char *error;
    enum password_verdict verdict;
    enum password_scheme scheme;
    bool verified;    /* a password check ran */
    bool no_password; /* the record has no password: logins refused */
    double passdb_seconds;
    double verify_seconds;
    enum auth_db_status passdb_status;
    char **users;
    size_t user_count;
};

/* One client connection's requests (the connection itself is the
 * server core's). */
struct auth_conn {
    struct auth_service *svc;
    struct line_conn *lc;
    bool may_name_ip; /* the peer may name the client's address (ip=) */
    bool ip_warned;   /* an ignored ip= has been logged for this connection */
    char peer_ip[64]; /* the peer's own address, "" for a Unix socket */
    struct auth_req *reqs;
    size_t pending;
};

struct auth_metrics {
    struct metric_family *request_seconds;
    struct metric_series *request[VERB_COUNT][RESULT_COUNT];
    struct metric_family *passdb_seconds;
    struct metric_family *scheme_seconds;
    struct metric_series *cache_hit;
    struct metric_series *cache_miss;
    struct metric_series *cache_expired;
    struct metric_series *cache_mismatch;
    struct metric_series *cache_entries;
    struct metric_series *cache_bytes;
    struct metric_series *cache_max_bytes;
    struct metric_series *connections;
    struct metric_series *connections_total;
};

struct auth_service {
    const struct auth_config *cfg;
    struct event_base *base;
    struct metrics_registry *registry;
    struct line_server_config server_cfg;
    struct line_server *server;
    struct auth_db *passdb;
    struct auth_db *userdb; /* NULL: the passdb answers USER and ITERATE */
    struct worker_pool *pool;
    struct auth_cache *cache;
    /* Failure counts per IP, and per user under keys "user:<name>" (an
     * address never starts so): in this process, or in the warden. */
    struct auth_penalty_store penalty;
    struct cidr_list trusted_networks;
    struct cidr_list trusted_clients;
    /* Attempts being checked right now per IP and per user: counted with
     * the stored failures, so parallel connections cannot all be admitted
     * before the first of their failures is counted. */
    struct smap *inflight_ip;
    struct smap *inflight_user;
    /* Failures this process has counted per IP key since an attempt's IP
     * count was answered, for the attempts between that answer and
     * admit(): the user's count is asked after the IP's (a warden round
     * trip), and failures counted meanwhile are not in the IP's count. */
    struct smap *ip_failed_here;
    /* Attempts that would pass the limit if every attempt being checked
     * failed: they wait for those outcomes instead of being refused, so a
     * burst of good logins from one webmail host is only serialised. */
    struct auth_req *wait_head;
    struct auth_req *wait_tail;
    struct event *wake; /* re-examines the waiting attempts, off the caller's stack */
    bool mech_allowed[3];
    struct auth_metrics m;
};

/* An entry of ip_failed_here. */
struct ip_failed {
    uint64_t count; /* failures counted here while the entry lived */
    unsigned refs;  /* attempts between their IP count and admit() */
};

/* ---------- time ---------- */

/* ---------- metrics ---------- */

static void metrics_init(struct auth_service *svc, struct metrics_registry *reg)
{
    static const char *const req_labels[] = {"verb", "result", NULL};
    static const char *const db_labels[] = {"driver", "result", NULL};
    static const char *const scheme_labels[] = {"scheme", NULL};
    static const char *const cache_labels[] = {"result", NULL};
    struct auth_metrics *m = &svc->m;
    m->request_seconds = metrics_histogram(
        reg, "petrel_auth_request_seconds", "Auth requests by verb and result, in seconds.",
        req_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    for (int v = 0; v < VERB_COUNT; v++) {
        for (int r = 0; r < RESULT_COUNT; r++) {
            const char *values[] = {verb_names[v], result_names[r]};
            m->request[v][r] = metric_series_get(m->request_seconds, values);
        }
    }
    m->passdb_seconds =
        metrics_histogram(reg, "petrel_auth_passdb_seconds",
                          "passdb/userdb lookups by driver and result, in seconds.", db_labels,
                          metrics_latency_buckets, metrics_latency_bucket_count);
    m->scheme_seconds =
        metrics_histogram(reg, "petrel_auth_scheme_verify_seconds",
                          "Password verification time by scheme, in seconds.", scheme_labels,
                          metrics_latency_buckets, metrics_latency_bucket_count);
    struct metric_family *lookups = metrics_counter(reg, "petrel_auth_cache_lookups_total",
                                                    "Auth cache lookups by result.", cache_labels);
    const char *hit[] = {"hit"}, *miss[] = {"miss"}, *expired[] = {"expired"},
               *mismatch[] = {"pwd_mismatch"};
    m->cache_hit = metric_series_get(lookups, hit);
    m->cache_miss = metric_series_get(lookups, miss);
    m->cache_expired = metric_series_get(lookups, expired);
    m->cache_mismatch = metric_series_get(lookups, mismatch);
    m->cache_entries = metric_series_get(
        metrics_gauge(reg, "petrel_auth_cache_entries", "Entries in the auth cache.", NULL), NULL);
    m->cache_bytes = metric_series_get(
        metrics_gauge(reg, "petrel_auth_cache_bytes", "Bytes held by the auth cache.", NULL), NULL);
    m->cache_max_bytes = metric_series_get(
        metrics_gauge(reg, "petrel_auth_cache_max_bytes", "The auth cache's byte limit.", NULL),
        NULL);
    line_server_metrics(reg, "auth", "the auth service", &m->connections, &m->connections_total);
}

static void collect_cache_gauges(void *ctx)
{
    struct auth_service *svc = ctx;
    metric_set(svc->m.cache_entries, (double)auth_cache_entries(svc->cache));
    metric_set(svc->m.cache_bytes, (double)auth_cache_bytes(svc->cache));
    metric_set(svc->m.cache_max_bytes, (double)auth_cache_max_bytes(svc->cache));
}

static void observe_db(struct auth_service *svc, const char *driver, enum auth_db_status st,
                       double seconds)
{
    static const char *const names[] = {"ok", "not_found", "error"};
    const char *values[] = {driver, names[st]};
    metric_observe(metric_series_get(svc->m.passdb_seconds, values), seconds);
}

/* ---------- requests ---------- */

static void wipe_free(char *s)
{
    if (s != NULL) {
        OPENSSL_cleanse(s, strlen(s));
        free(s);
    }
}

static struct auth_req *req_new(struct auth_conn *conn, enum auth_verb verb, const char *id)
{
    struct auth_req *r = xcalloc(1, sizeof(*r));
    r->svc = conn->svc;
    r->conn = conn;
    r->verb = verb;
    r->state = REQ_ACTIVE;
    snprintf(r->id, sizeof(r->id), "%s", id);
    r->started = clock_mono_now();
    r->next = conn->reqs;
    if (conn->reqs != NULL)
        conn->reqs->prev = r;
    conn->reqs = r;
    conn->pending++;
    return r;
}

static void req_unlink(struct auth_req *r)
{
    struct auth_conn *conn = r->conn;
    if (conn == NULL)
        return;
    DLIST_UNLINK(conn->reqs, r);
    r->next = r->prev = NULL;
    conn->pending--;
    r->conn = NULL;
}

static void release(struct auth_req *r);
static void wait_remove(struct auth_req *r);

static void ip_unwatch(struct auth_req *r);

static void req_free(struct auth_req *r)
{
    if (r->state == REQ_WAITING)
        wait_remove(r);
    ip_unwatch(r);
    release(r);
    req_unlink(r);
    if (r->timer != NULL)
        event_free(r->timer);
    free(r->username);
    wipe_free(r->password);
    free(r->service);
    free(r->ip);
    free(r->ip_key);
    free(r->user_key);
    sasl_exchange_free(&r->sasl);
    userdb_entry_free(r->entry);
    free(r->error);
    auth_db_users_free(r->users, r->user_count);
    free(r);
}

static struct auth_req *find_req(struct auth_conn *conn, const char *id)
{
    for (struct auth_req *r = conn->reqs; r != NULL; r = r->next) {
        if (strcmp(r->id, id) == 0)
            return r;
    }
    return NULL;
}

/* ---------- connections ---------- */

/* Sends a line, unless the connection has gone or is closing. */
static void send_line(struct auth_conn *conn, struct buf *line)
{
    if (conn != NULL)
        line_conn_write(conn->lc, line->data, line->len);
    buf_free(line);
}

/* `FAIL <id> [user=] reason= [temp]`: every refusal the service sends. */
static void send_fail(struct auth_conn *conn, const char *id, const char *user, const char *reason,
                      bool temp)
{
    struct buf line = {0};
    auth_line_add(&line, "FAIL");
    auth_line_add(&line, id);
    if (user != NULL)
        auth_line_add_param(&line, "user", user);
    auth_line_add_param(&line, "reason", reason);
    if (temp)
        auth_line_add(&line, "temp");
    auth_line_end(&line);
    send_line(conn, &line);
}

/* Sends `FAIL <id> reason=...` and closes once it has left. */
static void conn_fail_and_close(struct auth_conn *conn, const char *id, const char *reason)
{
    send_fail(conn, id, NULL, reason, false);
    log_info(COMPONENT, "closing connection after a protocol error", "peer=%s reason=\"%s\"",
             line_conn_peer(conn->lc), reason);
    line_conn_close(conn->lc);
}

static void *conn_open(void *ctx, struct line_conn *lc)
{
    struct auth_conn *conn = xcalloc(1, sizeof(*conn));
    conn->svc = ctx;
    conn->lc = lc;
    /* Only a Unix-socket peer (a local process the socket's mode admits)
     * or a TCP peer in auth.trusted_clients may say which address a login
     * comes from; anyone else could otherwise spread guesses over made-up
     * addresses or borrow an address in a user's allow_nets. */
    const char *peer = line_conn_peer(lc);
    struct net_addr addr;
    if (strncmp(peer, "unix", 4) == 0) {
        conn->may_name_ip = true;
    } else if (net_addr_parse_numeric(peer, &addr, NULL)) {
        net_addr_format_ip((const struct sockaddr *)&addr.ss, conn->peer_ip, sizeof(conn->peer_ip));
        conn->may_name_ip =
            cidr_list_match(&conn->svc->trusted_clients, (const struct sockaddr *)&addr.ss);
    }
    return conn;
}

/* The address a login is counted against: the client's ip= from a trusted
 * peer, the peer's own address otherwise. */
static char *request_ip(struct auth_conn *conn, const struct auth_line *line, size_t first)
{
    const char *v = auth_line_param(line, first, "ip");
    if (conn->may_name_ip)
        return v != NULL && *v != '\0' ? xstrdup(v) : NULL;
    if (v != NULL && !conn->ip_warned) {
        conn->ip_warned = true;
        char ip_q[128];
        log_warn(COMPONENT, "ignoring ip= from a peer not in auth.trusted_clients", "peer=%s ip=%s",
                 line_conn_peer(conn->lc), log_quote(ip_q, sizeof(ip_q), v));
    }
    return conn->peer_ip[0] != '\0' ? xstrdup(conn->peer_ip) : NULL;
}

/* Whether `ip` is in auth.trusted_networks (no per-address penalty). */
static bool ip_in_trusted_networks(const struct auth_service *svc, const char *ip)
{
    if (ip == NULL)
        return false;
    struct net_addr addr;
    char text[80];
    if (strchr(ip, ':') != NULL)
        snprintf(text, sizeof(text), "[%.64s]:0", ip);
    else
        snprintf(text, sizeof(text), "%.64s:0", ip);
    return net_addr_parse_numeric(text, &addr, NULL) &&
           cidr_list_match(&svc->trusted_networks, (const struct sockaddr *)&addr.ss);
}

/* The key `ip`'s failures are counted under: an IPv4 client seen through
 * a dual-stack socket (::ffff:a.b.c.d) is the IPv4 address, and an IPv6
 * client is its /48, as Dovecot's auth penalty does
 * (PENALTY_IPV6_MASK_BITS): one site holds a /48 and every host a /64 of
 * its own, so counting single IPv6 addresses would give one attacker 2^64
 * fresh counts (max_failures_per_ip never reached) and let it flood the
 * penalty table. Text that is no address is used as it is. */
static char *penalty_ip_key(const char *ip)
{
    if (ip == NULL)
        return NULL;
    struct in6_addr a6;
    struct in_addr a4;
    char text[INET6_ADDRSTRLEN];
    if (inet_pton(AF_INET6, ip, &a6) == 1) {
        if (IN6_IS_ADDR_V4MAPPED(&a6)) {
            memcpy(&a4, a6.s6_addr + 12, 4);
            inet_ntop(AF_INET, &a4, text, sizeof(text));
        } else {
            memset(a6.s6_addr + 6, 0, 10); /* keep 48 bits */
            inet_ntop(AF_INET6, &a6, text, sizeof(text));
        }
        return xstrdup(text);
    }
    if (inet_pton(AF_INET, ip, &a4) == 1) {
        inet_ntop(AF_INET, &a4, text, sizeof(text));
        return xstrdup(text);
    }
    return xstrdup(ip);
}

/* Requests held by an asynchronous step stay alive without their
 * connection and are freed when the step returns; the others go now. */
static void conn_close(void *state)
{
    struct auth_conn *conn = state;
    while (conn->reqs != NULL) {
        struct auth_req *r = conn->reqs;
        if (r->state == REQ_WORKER || r->state == REQ_PENALTY)
            req_unlink(r);
        else
            req_free(r);
    }
    free(conn);
}

/* ---------- replies ---------- */

static void finish(struct auth_req *r, enum req_result result)
{
    metric_observe(r->svc->m.request[r->verb][result], clock_seconds_since(&r->started));
    req_free(r);
}

static void reply_temp_fail(struct auth_req *r, const char *reason);

static void reply_ok(struct auth_req *r, const struct userdb_entry *e)
{
    struct buf line = {0};
    auth_line_add(&line, "OK");
    auth_line_add(&line, r->id);
    auth_line_add(&line, e->username);
    auth_line_add_userdb(&line, e);
    if (line.len > AUTH_LINE_MAX) {
        /* Clients refuse longer lines; a record this large is a data problem. */
        buf_free(&line);
        char user_q[300];
        log_error(COMPONENT, "user record too large for one reply", "user=%s",
                  log_quote(user_q, sizeof(user_q), e->username));
        reply_temp_fail(r, "user record too large");
        return;
    }
    auth_line_end(&line);
    send_line(r->conn, &line);
    finish(r, RESULT_OK);
}

static void reply_not_found(struct auth_req *r)
{
    struct buf line = {0};
    auth_line_add(&line, "NOTFOUND");
    auth_line_add(&line, r->id);
    auth_line_end(&line);
    send_line(r->conn, &line);
    finish(r, RESULT_NOT_FOUND);
}

static void reply_temp_fail(struct auth_req *r, const char *reason)
{
    send_fail(r->conn, r->id, r->username, reason, true);
    finish(r, RESULT_ERROR);
}

static void send_login_failure(struct auth_req *r)
{
    send_fail(r->conn, r->id, r->username, REASON_FAILED, false);
    finish(r, RESULT_FAIL);
}

static void failure_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    send_login_failure(arg);
}

/* A failed login: counted against the client's IP, logged with the real
 * reason, answered with a generic one after the failure delay (so a client
 * learns neither which part was wrong nor anything from the timing). */
static void login_failed(struct auth_req *r, const char *why)
{
    struct auth_service *svc = r->svc;
    char user_q[300], service_q[128], ip_q[128];
    log_info(COMPONENT, "authentication failed", "verb=%s user=%s service=%s ip=%s reason=\"%s\"",
             verb_names[r->verb],
             log_quote(user_q, sizeof(user_q), r->username != NULL ? r->username : ""),
             log_quote(service_q, sizeof(service_q), r->service != NULL ? r->service : "-"),
             log_quote(ip_q, sizeof(ip_q), r->ip != NULL ? r->ip : "-"), why);
    /* Not needed any more: do not keep it through the delay. */
    wipe_free(r->password);
    r->password = NULL;
    if (r->ip != NULL && !r->trusted_ip) {
        svc->penalty.ops->inc(svc->penalty.store, r->ip_key, clock_mono_ms());
        struct ip_failed *f = r->ip_key != NULL ? smap_get(svc->ip_failed_here, r->ip_key) : NULL;
        if (f != NULL)
            f->count++;
    }
    if (r->username != NULL && r->reserved)
        svc->penalty.ops->inc(svc->penalty.store, r->user_key, clock_mono_ms());
    release(r);
    /* Counted from the start of the check, so whether a password was hashed
     * (a known user) or not (an unknown one) does not show in the timing.
     * The IP's earlier failures add their penalty here, to the failure
     * only: a correct password is never held back. A trusted network
     * (monitor, proxy) waits for nothing. */
    int64_t delay = r->trusted_ip ? 0
                                  : svc->cfg->penalty.failure_delay_ms +
                                        auth_penalty_delay_ms(&svc->cfg->penalty, r->ip_failures);
    /* In microseconds: whole milliseconds on both ends would answer up to
     * a millisecond before the delay has passed. */
    int64_t delay_us = delay * 1000;
    if (delay_us > 0 && r->check_started_us != 0)
        delay_us -= clock_mono_us() - r->check_started_us;
    if (delay_us <= 0 || r->conn == NULL) {
        send_login_failure(r);
        return;
    }
    r->state = REQ_DELAYED;
    r->timer = evtimer_new(svc->base, failure_timer_cb, r);
    if (r->timer == NULL)
        petrel_fatal("out of memory creating an auth timer");
    struct timeval tv = {(time_t)(delay_us / 1000000), (suseconds_t)(delay_us % 1000000)};
    /* libevent counts a timer from the time it cached at the start of this
     * loop iteration, which the password check may have left behind. */
    event_base_update_cache_time(svc->base);
    evtimer_add(r->timer, &tv);
}

/* A login whose password matched: the user's networks decide. */
static void login_succeeded(struct auth_req *r, const struct userdb_entry *e)
{
    if (r->ip != NULL && !userdb_entry_allows_ip(e, r->ip)) {
        login_failed(r, "client address not in the user's allow_nets");
        return;
    }
    release(r);
    if (log_enabled(LOG_DEBUG, COMPONENT)) {
        char user_q[300], service_q[128], ip_q[128];
        log_debug(COMPONENT, "authenticated", "verb=%s user=%s service=%s ip=%s",
                  verb_names[r->verb], log_quote(user_q, sizeof(user_q), e->username),
                  log_quote(service_q, sizeof(service_q), r->service != NULL ? r->service : "-"),
                  log_quote(ip_q, sizeof(ip_q), r->ip != NULL ? r->ip : "-"));
    }
    reply_ok(r, e);
}

/* ---------- worker jobs ---------- */

static double elapsed(const struct timespec *t0)
{
    return clock_seconds_since(t0);
}

static void job_lookup_and_verify(struct auth_req *r, unsigned worker)
{
    struct auth_service *svc = r->svc;
    struct timespec t0;
    t0 = clock_mono_now();
    struct userdb_entry *passdb_entry = NULL;
    r->status = auth_db_lookup(svc->passdb, worker, r->username, true, &passdb_entry, &r->error);
    r->passdb_seconds = elapsed(&t0);
    r->passdb_status = r->status;
    if (r->status != AUTH_DB_OK)
        return;
    if (passdb_entry->password == NULL) {
        /* No stored password means no password login, not an empty password. */
        r->no_password = true;
        r->verdict = PASSWORD_MISMATCH;
        r->entry = passdb_entry;
        return;
    }
    t0 = clock_mono_now();
    r->verified = true;
    r->verdict = password_verify(passdb_entry->password, r->password,
                                 svc->cfg->passdb.default_scheme, &r->scheme);
    r->verify_seconds = elapsed(&t0);
    if (r->verdict != PASSWORD_MATCH || svc->userdb == NULL) {
        r->entry = passdb_entry;
        return;
    }
    userdb_entry_free(passdb_entry);
    r->status = auth_db_lookup(svc->userdb, worker, r->username, false, &r->entry, &r->error);
}

static void auth_job_run(void *job, unsigned worker)
{
    struct auth_req *r = job;
    struct auth_service *svc = r->svc;
    struct auth_db *userdb = svc->userdb != NULL ? svc->userdb : svc->passdb;
    struct timespec t0;
    switch (r->verb) {
    case VERB_VERIFY:
    case VERB_AUTH:
        job_lookup_and_verify(r, worker);
        break;
    case VERB_USER:
        t0 = clock_mono_now();
        r->status = auth_db_lookup(userdb, worker, r->username, false, &r->entry, &r->error);
        r->passdb_seconds = elapsed(&t0);
        r->passdb_status = r->status;
        break;
    case VERB_ITERATE:
        t0 = clock_mono_now();
        r->status = auth_db_iterate(userdb, worker, &r->users, &r->user_count, &r->error)
                        ? AUTH_DB_OK
                        : AUTH_DB_ERROR;
        r->passdb_seconds = elapsed(&t0);
        r->passdb_status = r->status;
        break;
    case VERB_COUNT:
        break;
    }
}

static void login_job_done(struct auth_req *r)
{
    struct auth_service *svc = r->svc;
    observe_db(svc, auth_db_name(svc->passdb), r->passdb_status, r->passdb_seconds);
    if (r->verified) {
        const char *values[] = {password_scheme_name(r->scheme)};
        metric_observe(metric_series_get(svc->m.scheme_seconds, values), r->verify_seconds);
    }
    if (r->passdb_status == AUTH_DB_NOT_FOUND) {
        /* The cache answers USER too: "not in the passdb" says nothing about
         * a separate userdb. */
        if (svc->userdb == NULL)
            auth_cache_put_negative(svc->cache, r->username, clock_mono_ms());
        login_failed(r, "unknown user");
        return;
    }
    if (r->passdb_status == AUTH_DB_ERROR) {
        log_error(COMPONENT, "passdb lookup failed", "driver=%s error=\"%s\"",
                  auth_db_name(svc->passdb), r->error != NULL ? r->error : "");
        reply_temp_fail(r, REASON_TEMP);
        return;
    }
    if (r->verdict == PASSWORD_INVALID) {
        char user_q[300];
        log_error(COMPONENT, "stored password has an unknown scheme or is malformed", "user=%s",
                  log_quote(user_q, sizeof(user_q), r->username));
        login_failed(r, "stored password unusable");
        return;
    }
    if (r->verdict == PASSWORD_MISMATCH) {
        login_failed(r, r->no_password ? "account has no password" : "password mismatch");
        return;
    }
    /* The password matched; now the userdb record (when separate). */
    if (r->status == AUTH_DB_NOT_FOUND) {
        login_failed(r, "no userdb record");
        return;
    }
    if (r->status == AUTH_DB_ERROR) {
        log_error(COMPONENT, "userdb lookup failed", "error=\"%s\"",
                  r->error != NULL ? r->error : "");
        reply_temp_fail(r, REASON_TEMP);
        return;
    }
    auth_cache_put(svc->cache, r->entry, r->password, clock_mono_ms());
    login_succeeded(r, r->entry);
}

static void reply_users(struct auth_req *r)
{
    struct buf out = {0};
    for (size_t i = 0; i < r->user_count; i++) {
        auth_line_add(&out, "ITEM");
        auth_line_add(&out, r->id);
        auth_line_add(&out, r->users[i]);
        auth_line_end(&out);
        if (out.len >= 65536 && r->conn != NULL) {
            line_conn_write(r->conn->lc, out.data, out.len);
            buf_reset(&out);
        }
    }
    auth_line_add(&out, "DONE");
    auth_line_add(&out, r->id);
    auth_line_end(&out);
    send_line(r->conn, &out);
    finish(r, RESULT_OK);
}

static void auth_job_done(void *job, bool cancelled)
{
    struct auth_req *r = job;
    struct auth_service *svc = r->svc;
    /* A login whose client left while its password was checked is still
     * answered into the void: its failure counts and is logged, or a
     * client could have any number of (costly) checks made past the
     * failure limits by closing each connection before the answer. */
    bool login = r->verb == VERB_VERIFY || r->verb == VERB_AUTH;
    if (cancelled || (r->conn == NULL && !login)) {
        req_free(r);
        return;
    }
    const char *userdb_name = auth_db_name(svc->userdb != NULL ? svc->userdb : svc->passdb);
    switch (r->verb) {
    case VERB_VERIFY:
    case VERB_AUTH:
        login_job_done(r);
        return;
    case VERB_USER:
        observe_db(svc, userdb_name, r->passdb_status, r->passdb_seconds);
        if (r->status == AUTH_DB_OK) {
            auth_cache_put(svc->cache, r->entry, NULL, clock_mono_ms());
            reply_ok(r, r->entry);
        } else if (r->status == AUTH_DB_NOT_FOUND) {
            auth_cache_put_negative(svc->cache, r->username, clock_mono_ms());
            reply_not_found(r);
        } else {
            log_error(COMPONENT, "userdb lookup failed", "error=\"%s\"",
                      r->error != NULL ? r->error : "");
            reply_temp_fail(r, REASON_TEMP);
        }
        return;
    case VERB_ITERATE:
        observe_db(svc, userdb_name, r->passdb_status, r->passdb_seconds);
        if (r->status == AUTH_DB_OK) {
            reply_users(r);
        } else {
            log_error(COMPONENT, "user iteration failed", "error=\"%s\"",
                      r->error != NULL ? r->error : "");
            reply_temp_fail(r, REASON_TEMP); /* the driver's message is for the log only */
        }
        return;
    case VERB_COUNT:
        break;
    }
    req_free(r);
}

static void submit(struct auth_req *r)
{
    r->state = REQ_WORKER;
    if (!worker_pool_submit(r->svc->pool, r, auth_job_run, auth_job_done)) {
        r->state = REQ_DELAYED;
        log_warn(COMPONENT, "worker queue full, refusing a request", "verb=%s pending=%zu",
                 verb_names[r->verb], worker_pool_pending(r->svc->pool));
        reply_temp_fail(r, "auth service busy");
    }
}

/* ---------- login processing ---------- */

/* The cache answers most logins on the loop; the rest go to a worker. */
static void login_process(struct auth_req *r)
{
    struct auth_service *svc = r->svc;
    r->check_started_us = clock_mono_us();
    const struct userdb_entry *cached = NULL;
    enum auth_cache_result cr =
        auth_cache_lookup(svc->cache, r->username, r->password, clock_mono_ms(), &cached);
    switch (cr) {
    case AUTH_CACHE_HIT:
        metric_add(svc->m.cache_hit, 1);
        login_succeeded(r, cached);
        return;
    case AUTH_CACHE_HIT_NEGATIVE:
        metric_add(svc->m.cache_hit, 1);
        login_failed(r, "unknown user (cached)");
        return;
    case AUTH_CACHE_PWD_MISMATCH:
        metric_add(svc->m.cache_mismatch, 1);
        break;
    case AUTH_CACHE_EXPIRED:
        metric_add(svc->m.cache_expired, 1);
        break;
    case AUTH_CACHE_MISS:
        metric_add(svc->m.cache_miss, 1);
        break;
    }
    submit(r);
}

/* ---------- admission: failure counts and limits ---------- */

static unsigned inflight_get(struct smap *map, const char *key)
{
    unsigned *n = smap_get(map, key);
    return n != NULL ? *n : 0;
}

static void inflight_add(struct smap *map, const char *key)
{
    unsigned *n = smap_get(map, key);
    if (n == NULL) {
        n = xcalloc(1, sizeof(*n));
        smap_put(map, key, n);
    }
    (*n)++;
}

static void inflight_sub(struct smap *map, const char *key)
{
    unsigned *n = smap_get(map, key);
    if (n != NULL && --*n == 0)
        free(smap_remove(map, key));
}

/* Gives back the slot admit() took, once the attempt's outcome is known
 * (its failure, if any, is counted by then). */
static void release(struct auth_req *r)
{
    if (!r->reserved)
        return;
    r->reserved = false;
    if (r->ip != NULL && !r->trusted_ip)
        inflight_sub(r->svc->inflight_ip, r->ip_key);
    inflight_sub(r->svc->inflight_user, r->user_key);
    if (r->svc->wait_head != NULL)
        event_active(r->svc->wake, EV_TIMEOUT, 1);
}

static void wait_add(struct auth_req *r)
{
    struct auth_service *svc = r->svc;
    r->state = REQ_WAITING;
    DLIST_APPEND_AT(svc->wait_head, svc->wait_tail, r, wait_prev, wait_next);
}

static void wait_remove(struct auth_req *r)
{
    struct auth_service *svc = r->svc;
    DLIST_REMOVE_AT(svc->wait_head, svc->wait_tail, r, wait_prev, wait_next);
    r->state = REQ_ACTIVE;
}

static void limited_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct auth_req *r = arg;
    send_fail(r->conn, r->id, r->username, REASON_LIMITED, true);
    finish(r, RESULT_LIMITED);
}

/* Over a limit: refused without looking at the password, as a temporary
 * failure (the client may try again later), after the failure delay. */
static void login_limited(struct auth_req *r, const char *which)
{
    struct auth_service *svc = r->svc;
    char user_q[300], ip_q[128];
    log_info(COMPONENT, "login refused: too many failed logins", "limit=%s user=%s ip=%s", which,
             log_quote(user_q, sizeof(user_q), r->username),
             log_quote(ip_q, sizeof(ip_q), r->ip != NULL ? r->ip : "-"));
    wipe_free(r->password);
    r->password = NULL;
    int64_t delay = r->trusted_ip ? 0 : svc->cfg->penalty.failure_delay_ms;
    if (delay <= 0 || r->conn == NULL) {
        limited_timer_cb(-1, 0, r);
        return;
    }
    r->state = REQ_DELAYED;
    r->timer = evtimer_new(svc->base, limited_timer_cb, r);
    if (r->timer == NULL)
        petrel_fatal("out of memory creating an auth timer");
    struct timeval tv = clock_ms_to_timeval(delay);
    evtimer_add(r->timer, &tv);
}

/* Takes note of the IP's count being answered now (see ip_failed_here). */
static void ip_watch(struct auth_req *r)
{
    struct ip_failed *f = smap_get(r->svc->ip_failed_here, r->ip_key);
    if (f == NULL) {
        f = xcalloc(1, sizeof(*f));
        smap_put(r->svc->ip_failed_here, r->ip_key, f);
    }
    f->refs++;
    r->ip_watch = true;
    r->ip_failed_mark = f->count;
}

static void ip_unwatch(struct auth_req *r)
{
    if (!r->ip_watch)
        return;
    r->ip_watch = false;
    struct ip_failed *f = smap_get(r->svc->ip_failed_here, r->ip_key);
    if (f != NULL && --f->refs == 0)
        free(smap_remove(r->svc->ip_failed_here, r->ip_key));
}

/* The IP's failures as of now: its answered count plus the failures
 * counted here since (their increments may not be in that answer). */
static void ip_failures_fresh(struct auth_req *r)
{
    if (!r->ip_watch)
        return;
    const struct ip_failed *f = smap_get(r->svc->ip_failed_here, r->ip_key);
    if (f != NULL)
        r->ip_failures += (unsigned)(f->count - r->ip_failed_mark);
    ip_unwatch(r);
}

/* Both counts are known: admit the attempt (check the password at once)
 * or refuse it because the IP or the user is at its limit. */
static void admit(struct auth_req *r, unsigned user_failures)
{
    struct auth_service *svc = r->svc;
    ip_failures_fresh(r);
    const struct auth_penalty_config *pc = &svc->cfg->penalty;
    bool count_ip = !r->trusted_ip && r->ip != NULL && pc->max_ip_failures > 0;
    bool count_user = pc->max_user_failures > 0;
    if (count_ip && (int64_t)r->ip_failures >= pc->max_ip_failures) {
        login_limited(r, "ip");
        return;
    }
    if (count_user && (int64_t)user_failures >= pc->max_user_failures) {
        login_limited(r, "user");
        return;
    }
    /* Every attempt being checked may still fail: admitting this one too
     * could let the count pass the limit, so it waits for an outcome and
     * is looked at again with the counts then. */
    if ((count_ip && (int64_t)r->ip_failures + inflight_get(svc->inflight_ip, r->ip_key) >=
                         pc->max_ip_failures) ||
        (count_user && (int64_t)user_failures + inflight_get(svc->inflight_user, r->user_key) >=
                           pc->max_user_failures)) {
        wait_add(r);
        return;
    }
    r->reserved = true;
    if (r->ip != NULL && !r->trusted_ip)
        inflight_add(svc->inflight_ip, r->ip_key);
    inflight_add(svc->inflight_user, r->user_key);
    login_process(r);
}

static void user_penalty_answer(unsigned failures, void *ctx)
{
    struct auth_req *r = ctx;
    if (r->conn == NULL) { /* the client left while we asked */
        req_free(r);
        return;
    }
    r->state = REQ_ACTIVE;
    admit(r, failures);
}

static void login_lookup(struct auth_req *r);

/* An attempt finished: every waiting one looks up its counts again (the
 * finished attempt's failure, if any, is counted by now) and is admitted,
 * refused, or waits again. Waiters are few (one per connection at most
 * and bounded by the connection limits), so waking all is cheap. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct auth_service *svc = arg;
    struct auth_req *list = svc->wait_head;
    svc->wait_head = svc->wait_tail = NULL;
    while (list != NULL) {
        struct auth_req *r = list;
        list = r->wait_next;
        r->wait_next = r->wait_prev = NULL;
        r->state = REQ_ACTIVE;
        login_lookup(r);
    }
}

static void ask_user_failures(struct auth_req *r)
{
    r->state = REQ_PENALTY;
    r->svc->penalty.ops->get(r->svc->penalty.store, r->user_key, clock_mono_ms(), user_penalty_answer, r);
}

static void penalty_answer(unsigned failures, void *ctx)
{
    struct auth_req *r = ctx;
    if (r->conn == NULL) { /* the client left while we asked */
        req_free(r);
        return;
    }
    r->ip_failures = failures;
    ip_watch(r);
    ask_user_failures(r);
}

/* Username and password known: look up the IP's and the user's failures,
 * then admit. */
static void login_start(struct auth_req *r)
{
    if (!auth_username_valid(r->username)) {
        login_failed(r, "invalid username");
        return;
    }
    r->user_key = xasprintf("user:%s", r->username);
    /* "Bob" and "BOB" are one account for a passdb that ignores case (an
     * SQL collation does): counted apart, every spelling would bring its
     * own max_failures_per_user guesses. */
    for (char *p = r->user_key + 5; *p != '\0'; p++) {
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    }
    login_lookup(r);
}

/* Looks up the IP's and the user's failures, then admit(). */
static void login_lookup(struct auth_req *r)
{
    if (r->ip == NULL || r->trusted_ip) {
        ask_user_failures(r);
        return;
    }
    r->state = REQ_PENALTY;
    r->svc->penalty.ops->get(r->svc->penalty.store, r->ip_key, clock_mono_ms(), penalty_answer, r);
}

/* ---------- verbs ---------- */

static char *param_dup(const struct auth_line *line, size_t first, const char *key)
{
    const char *v = auth_line_param(line, first, key);
    return v != NULL && *v != '\0' ? xstrdup(v) : NULL;
}

static void reply_fail_id(struct auth_conn *conn, const char *id, const char *reason)
{
    send_fail(conn, id, NULL, reason, false);
}

static void reply_fail_temp_id(struct auth_conn *conn, const char *id, const char *reason)
{
    send_fail(conn, id, NULL, reason, true);
}

static void handle_verify(struct auth_conn *conn, const struct auth_line *line)
{
    if (line->count < 4) {
        reply_fail_id(conn, line->fields[1], "VERIFY needs a username and a password");
        return;
    }
    struct auth_req *r = req_new(conn, VERB_VERIFY, line->fields[1]);
    r->username = xstrdup(line->fields[2]);
    r->password = xstrdup(line->fields[3]);
    r->service = param_dup(line, 4, "service");
    r->ip = request_ip(conn, line, 4);
    r->ip_key = penalty_ip_key(r->ip);
    r->trusted_ip = ip_in_trusted_networks(conn->svc, r->ip);
    login_start(r);
}

static void sasl_advance(struct auth_req *r, const char *response)
{
    struct buf challenge = {0};
    enum sasl_step_result st = sasl_exchange_step(&r->sasl, response, &challenge);
    if (st == SASL_STEP_CHALLENGE) {
        r->state = REQ_SASL_WAIT;
        struct buf line = {0};
        auth_line_add(&line, "CONT");
        auth_line_add(&line, r->id);
        buf_append_char(&challenge, '\0');
        auth_line_add(&line, challenge.data);
        auth_line_end(&line);
        send_line(r->conn, &line);
        buf_free(&challenge);
        return;
    }
    buf_free(&challenge);
    if (st == SASL_STEP_FAILED) {
        login_failed(r, r->sasl.error != NULL ? r->sasl.error : "SASL exchange failed");
        return;
    }
    r->username = r->sasl.username;
    r->password = r->sasl.password;
    r->sasl.username = NULL;
    r->sasl.password = NULL;
    login_start(r);
}

static void handle_auth(struct auth_conn *conn, const struct auth_line *line)
{
    const char *id = line->fields[1];
    if (line->count < 3) {
        reply_fail_id(conn, id, "AUTH needs a mechanism");
        return;
    }
    if (find_req(conn, id) != NULL) {
        reply_fail_id(conn, id, "request id already in use");
        return;
    }
    enum sasl_mech mech = sasl_mech_parse(line->fields[2]);
    if (mech == SASL_MECH_UNKNOWN || !conn->svc->mech_allowed[mech]) {
        reply_fail_id(conn, id, "unsupported mechanism");
        return;
    }
    struct auth_req *r = req_new(conn, VERB_AUTH, id);
    r->service = param_dup(line, 3, "service");
    r->ip = request_ip(conn, line, 3);
    r->ip_key = penalty_ip_key(r->ip);
    r->trusted_ip = ip_in_trusted_networks(conn->svc, r->ip);
    sasl_exchange_init(&r->sasl, mech);
    sasl_advance(r, auth_line_param(line, 3, "resp"));
}

static void handle_cont(struct auth_conn *conn, const struct auth_line *line)
{
    struct auth_req *r = find_req(conn, line->fields[1]);
    if (r == NULL || r->state != REQ_SASL_WAIT || r->verb != VERB_AUTH) {
        reply_fail_id(conn, line->fields[1], "no SASL exchange with this id");
        return;
    }
    if (line->count >= 3 && strcmp(line->fields[2], "*") == 0) {
        /* The client gave up (RFC 4422 abort): no failure is counted. */
        reply_fail_id(conn, r->id, "aborted");
        req_free(r);
        return;
    }
    sasl_advance(r, line->count >= 3 ? line->fields[2] : "");
}

static void handle_user(struct auth_conn *conn, const struct auth_line *line)
{
    if (line->count < 3) {
        reply_fail_id(conn, line->fields[1], "USER needs a username");
        return;
    }
    struct auth_req *r = req_new(conn, VERB_USER, line->fields[1]);
    r->username = xstrdup(line->fields[2]);
    if (!auth_username_valid(r->username)) {
        reply_not_found(r);
        return;
    }
    struct auth_service *svc = conn->svc;
    const struct userdb_entry *cached = NULL;
    switch (auth_cache_lookup(svc->cache, r->username, NULL, clock_mono_ms(), &cached)) {
    case AUTH_CACHE_HIT:
        metric_add(svc->m.cache_hit, 1);
        reply_ok(r, cached);
        return;
    case AUTH_CACHE_HIT_NEGATIVE:
        metric_add(svc->m.cache_hit, 1);
        reply_not_found(r);
        return;
    case AUTH_CACHE_EXPIRED:
        metric_add(svc->m.cache_expired, 1);
        break;
    case AUTH_CACHE_MISS:
    case AUTH_CACHE_PWD_MISMATCH:
        metric_add(svc->m.cache_miss, 1);
        break;
    }
    submit(r);
}

static void handle_iterate(struct auth_conn *conn, const struct auth_line *line)
{
    submit(req_new(conn, VERB_ITERATE, line->fields[1]));
}

static void handle_line(void *state, char *text, size_t len)
{
    struct auth_conn *conn = state;
    struct auth_line line;
    struct petrel_error err;
    if (!auth_line_parse(text, len, &line, &err)) {
        conn_fail_and_close(conn, "-", err.message);
        return;
    }
    if (line.count < 2 || !auth_id_valid(line.fields[1])) {
        conn_fail_and_close(conn, "-", "missing or invalid request id");
        return;
    }
    const char *verb = line.fields[0];
    const char *id = line.fields[1];
    if (strcmp(verb, "CONT") == 0) {
        handle_cont(conn, &line);
        return;
    }
    if (conn->pending >= (size_t)conn->svc->cfg->max_pending_per_connection) {
        reply_fail_temp_id(conn, id, "too many requests in flight on this connection");
        return;
    }
    if (strcmp(verb, "VERIFY") == 0)
        handle_verify(conn, &line);
    else if (strcmp(verb, "AUTH") == 0)
        handle_auth(conn, &line);
    else if (strcmp(verb, "USER") == 0)
        handle_user(conn, &line);
    else if (strcmp(verb, "ITERATE") == 0)
        handle_iterate(conn, &line);
    else
        reply_fail_id(conn, id, "unknown verb");
}

static void conn_bad_input(void *state, const char *reason)
{
    conn_fail_and_close(state, "-", reason);
}

static const struct line_server_ops server_ops = {
    .open = conn_open,
    .line = handle_line,
    .bad_input = conn_bad_input,
    .close = conn_close,
};

/* ---------- life cycle ---------- */

static unsigned worker_count(const struct auth_config *cfg)
{
    if (cfg->worker_threads > 0)
        return (unsigned)cfg->worker_threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > 16 ? 16 : (unsigned)cpus;
}

struct auth_service *auth_service_start(const struct service_env *env,
                                        const struct auth_config *cfg,
                                        struct auth_penalty_store penalty, struct petrel_error *err)
{
    if (!cfg->has_passdb) {
        if (penalty.ops != NULL)
            penalty.ops->free(penalty.store);
        petrel_error_set(err, PETREL_ERR_INVALID, "auth: no passdb configured");
        return NULL;
    }
    struct auth_service *svc = xcalloc(1, sizeof(*svc));
    svc->cfg = cfg;
    svc->penalty = penalty; /* ours from here on, freed with the service */
    svc->base = env->base;
    svc->registry = env->metrics;
    metrics_init(svc, env->metrics);
    for (size_t i = 0; cfg->mechanisms != NULL && cfg->mechanisms[i] != NULL; i++)
        svc->mech_allowed[sasl_mech_parse(cfg->mechanisms[i])] = true;
    svc->mech_allowed[SASL_MECH_UNKNOWN] = false;
    svc->cache = auth_cache_new(&cfg->cache);
    svc->inflight_ip = smap_new();
    svc->inflight_user = smap_new();
    svc->ip_failed_here = smap_new();
    svc->wake = event_new(svc->base, -1, 0, wake_cb, svc);
    if (svc->wake == NULL)
        petrel_fatal("out of memory creating an auth event");
    if (!cidr_list_parse((const char *const *)cfg->trusted_networks, &svc->trusted_networks, err) ||
        !cidr_list_parse((const char *const *)cfg->trusted_clients, &svc->trusted_clients, err))
        goto fail;
    metrics_add_collector(env->metrics, collect_cache_gauges, svc);
    unsigned threads = worker_count(cfg);
    svc->server_cfg = (struct line_server_config){
        .component = COMPONENT,
        .section = "auth",
        .allowed_nets = (const char *const *)cfg->allowed_nets,
        .socket_mode = cfg->socket_mode,
        .max_connections = cfg->max_connections,
        .max_connections_per_ip = cfg->max_connections_per_ip,
        .max_line = AUTH_LINE_MAX,
        .handshake_timeout_ms = cfg->handshake_timeout_ms,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        /* The FAIL for an over-long line is the last thing the client sees. */
        .drain_on_close = true,
        .connections = svc->m.connections,
        .connections_total = svc->m.connections_total,
    };
    svc->server = line_server_new(env->base, &svc->server_cfg, &server_ops, svc, err);
    if (svc->server == NULL)
        goto fail;
    svc->passdb = auth_db_open(&cfg->passdb, threads, err);
    if (svc->passdb == NULL)
        goto fail;
    if (cfg->has_userdb) {
        svc->userdb = auth_db_open(&cfg->userdb, threads, err);
        if (svc->userdb == NULL)
            goto fail;
    }
    svc->pool = worker_pool_new(env->base, threads, (size_t)cfg->max_queue);
    if (svc->pool == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "auth: cannot start %u worker threads", threads);
        goto fail;
    }
    if (!line_server_listen(svc->server, cfg->listen, env->readiness, err))
        goto fail;
    log_info(COMPONENT, "listening", "address=%s listeners=%zu passdb=%s userdb=%s workers=%u",
             line_server_address(svc->server), line_server_listener_count(svc->server),
             auth_db_name(svc->passdb),
             auth_db_name(svc->userdb != NULL ? svc->userdb : svc->passdb), threads);
    return svc;
fail:
    auth_service_free(svc);
    return NULL;
}

const char *auth_service_address(const struct auth_service *svc)
{
    return svc->server != NULL ? line_server_address(svc->server) : "";
}

void auth_service_stop_accepting(struct auth_service *svc)
{
    if (svc->server != NULL)
        line_server_stop_accepting(svc->server);
}

static void count_in_flight(void *state, void *arg)
{
    const struct auth_conn *conn = state;
    size_t *n = arg;
    for (const struct auth_req *r = conn->reqs; r != NULL; r = r->next)
        *n += r->state != REQ_SASL_WAIT ? 1 : 0;
}

size_t auth_service_in_flight(const struct auth_service *svc)
{
    size_t n = 0;
    line_server_each(svc->server, count_in_flight, &n);
    return n;
}

void auth_service_free(struct auth_service *svc)
{
    if (svc == NULL)
        return;
    line_server_free(svc->server); /* the listeners, then every connection */
    /* Requests still on workers come back cancelled or done, and free themselves. */
    worker_pool_free(svc->pool);
    auth_db_close(svc->userdb);
    auth_db_close(svc->passdb);
    metrics_remove_collector(svc->registry, collect_cache_gauges, svc);
    auth_cache_free(svc->cache);
    if (svc->penalty.ops != NULL)
        svc->penalty.ops->free(svc->penalty.store);
    cidr_list_free(&svc->trusted_networks);
    cidr_list_free(&svc->trusted_clients);
    if (svc->inflight_ip != NULL)
        smap_free(svc->inflight_ip, free);
    if (svc->inflight_user != NULL)
        smap_free(svc->inflight_user, free);
    if (svc->ip_failed_here != NULL)
        smap_free(svc->ip_failed_here, free);
    if (svc->wake != NULL)
        event_free(svc->wake);
    free(svc);
}
