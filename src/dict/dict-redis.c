/* kvstore: a Redis-protocol server (Redis, Valkey) through hiredis's
 * asynchronous API on the daemon's libevent loop. Single-value.
 *
 * Options (dicts.<name>):
 *   address   "127.0.0.1:6379" (default), "[::1]:6379", "host:port" (resolved
 *             with evdns, never a blocking lookup) or "unix:/path/to/socket"
 *   prefix    prepended to every storage key (default none), e.g. "petrel:"
 *   db        SELECTed on connect (default 0)
 *   username  AUTH user name (Redis 6 ACLs; optional)
 *   password  AUTH password (optional; never logged)
 *   timeout   limit for connecting and for every command (default 5s)
 *
 * Connection: one per dict, opened on first use, commands pipelined on it.
 * A handshake (AUTH, SELECT, or a PING when neither is configured) runs
 * first; operations arriving meanwhile wait behind it and are only sent once
 * it succeeded. A failed connect, handshake or connection, or a command
 * without a reply within `timeout`, takes the connection down: every pending
 * operation is answered with the reason (a commit that may have reached the
 * server answers WRITE_UNCERTAIN, one that never left answers FAILED). The
 * next connect is tried lazily by a later operation, with exponential
 * backoff (100 ms doubling to 5 s); until then operations fail at once, so a
 * server that is down costs callers nothing and never blocks the loop.
 *
 * Storage: a value is a Redis string under "<prefix><storage key>"; counters
 * are decimal text. expire_secs becomes SET ... EX (native TTL), so
 * expire-scan has nothing to do.
 *
 * Commit: one script call per transaction. Redis does not roll back
 * MULTI/EXEC when a command inside fails, so the script first checks every
 * atomic-inc (the key holds a Redis integer, the sum fits 64 bits, both
 * computed exactly and following earlier operations of the same batch)
 * without writing, and only then applies SET / DEL / INCRBY. A failed check
 * applies nothing. The script is called by its SHA1 (EVALSHA, computed once
 * per dict); a NOSCRIPT reply (a server that never ran it, or SCRIPT FLUSH
 * or a restart since) means nothing ran, and the commit is sent again as
 * EVAL, which also caches the script. A commit of one set or one unset
 * (no atomic-inc) is a single command, atomic on its own: plain SET (with
 * EX) or DEL, with the result the script would give.
 *
 * Iterate: SCAN MATCH <escaped prefix>* COUNT 1000, values by MGET, one batch
 * at a time and only when the consumer asks for more rows, so any number of
 * keys streams in constant memory. SortByKey / SortByValue need every row
 * first: sorted iterates hold the whole result in memory. SCAN may report a
 * key twice when Redis resizes its table during the scan; sorted iterates
 * drop such duplicates, unsorted ones pass them on. Keys under the prefix
 * that hold other Redis types are skipped (except with NoValue, where no
 * value is read). A connection lost during an iteration fails it. */
#include "dict/dict-private.h"

#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/backoff.h"
#include "net/endpoint.h"
#include "net/resolve.h"

#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/util.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#define COMPONENT "dict"
#define KV_DEFAULT_PORT 6379
#define KV_DEFAULT_TIMEOUT_MS 5000
#define KV_SCAN_COUNT "1000"
#define KV_BACKOFF_MIN_MS 100
#define KV_BACKOFF_MAX_MS 5000
#define KV_MAX_PREFIX 256
/* Longer TTLs are clamped (about 31,700 years): Redis refuses EX values whose
 * milliseconds overflow, and that must not fail a batch half-way. */
#define KV_MAX_EXPIRE_SECS 1000000000000LL
#define KV_ERR_SIZE 512
/* While requests are pending the timer looks at least this often whether
 * the dict is closing, to answer them during the daemon's drain instead of
 * holding shutdown until `timeout`. */
#define KV_CLOSING_POLL_MS 100

/* ---------- configuration ---------- */

struct kv_config {
    char *address; /* as configured, for messages */
    struct net_endpoint ep; /* parsed `address`; a host name is resolved at each connect */
    char *prefix;
    size_t prefix_len;
    int64_t db;
    char *username;
    char *password;
    int64_t timeout_ms;
};

static void kv_config_free(void *p)
{
    struct kv_config *c = p;
    if (c == NULL)
        return;
    free(c->address);
    free(c->prefix);
    free(c->username);
    if (c->password != NULL) {
        memset(c->password, 0, strlen(c->password));
        free(c->password);
    }
    free(c);
}

static void *kv_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                            const char *dict_name)
{
    static const char *const keys[] = {"driver",   "address",  "prefix",  "db",
                                       "username", "password", "timeout", NULL};
    (void)dict_name;
    if (!cfg_check_keys(ctx, map, path, keys))
        return NULL;
    struct kv_config *c = xcalloc(1, sizeof(*c));
    c->timeout_ms = KV_DEFAULT_TIMEOUT_MS;
    char *address = NULL;
    char key_path[192];
    if (!cfg_string(ctx, map, path, "address", &address) ||
        !cfg_string(ctx, map, path, "prefix", &c->prefix) ||
        !cfg_int(ctx, map, path, "db", 0, INT32_MAX, &c->db) ||
        !cfg_string(ctx, map, path, "username", &c->username) ||
        !cfg_string(ctx, map, path, "password", &c->password) ||
        !cfg_duration_ms(ctx, map, path, "timeout", 10, 3600 * 1000, &c->timeout_ms)) {
        free(address); /* not yet owned by c */
        goto fail;
    }
    c->address = address != NULL ? address : xstrdup("127.0.0.1:6379");
    struct petrel_error e;
    if (!net_endpoint_parse(c->address,
                            NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_PORT_OPTIONAL |
                                NET_ENDPOINT_PORT_NONZERO,
                            KV_DEFAULT_PORT, &c->ep, &e)) {
        snprintf(key_path, sizeof(key_path), "%s.address", path);
        cfg_fail(ctx, ynode_get(map, "address"), key_path, "%s", e.message);
        goto fail;
    }
    if (c->prefix == NULL)
        c->prefix = xstrdup("");
    c->prefix_len = strlen(c->prefix);
    if (c->prefix_len > KV_MAX_PREFIX) {
        snprintf(key_path, sizeof(key_path), "%s.prefix", path);
        cfg_fail(ctx, ynode_get(map, "prefix"), key_path, "longer than %d bytes", KV_MAX_PREFIX);
        goto fail;
    }
    if (c->password != NULL && c->password[0] == '\0') {
        free(c->password);
        c->password = NULL;
    }
    if (c->username != NULL && c->username[0] == '\0') {
        free(c->username);
        c->username = NULL;
    }
    if (c->username != NULL && c->password == NULL) {
        snprintf(key_path, sizeof(key_path), "%s.username", path);
        cfg_fail(ctx, ynode_get(map, "username"), key_path, "needs password as well");
        goto fail;
    }
    return c;
fail:
    kv_config_free(c);
    return NULL;
}

/* ---------- connection ---------- */

enum kv_state {
    KV_DOWN,      /* no connection; the next operation connects (after backoff) */
    KV_RESOLVING, /* looking the host name up */
    KV_HANDSHAKE, /* connected or connecting; AUTH / SELECT / PING pending */
    KV_READY,
};

struct kv_req;
/* Completes a request: exactly one of `reply` (a server reply, possibly an
 * error reply) and `error` (the request failed; message) is set. */
typedef void kv_done_fn(struct kv_req *req, const redisReply *reply, const char *error);

struct kv_req {
    struct kv_req *prev;
    struct kv_req *next;
    struct kv_dict *kd;
    kv_done_fn *done;
    int64_t deadline; /* monotonic ms */
    char *cmd;        /* formatted command until handed to hiredis */
    size_t cmd_len;
    bool sent;     /* handed to hiredis: the server may have executed it */
    bool keep_cmd; /* keep `cmd` after sending (an EVALSHA commit: resent as
                    * EVAL on NOSCRIPT) */
    /* owner data */
    void *owner; /* iterator; NULL once the iterator went away */
    const char *what;
    dict_lookup_cb *lookup_cb;
    dict_commit_cb *commit_cb;
    void *cb_ctx;
};

struct kv_list {
    struct kv_req *head;
    struct kv_req *tail;
};

struct kv_dict {
    struct dict *dict;
    const struct kv_config *cfg;
    enum kv_state state;
    redisAsyncContext *ac;
    struct kv_list waiting;  /* behind the handshake, not sent yet */
    struct kv_list inflight; /* handed to hiredis, in reply order */
    size_t handshake_left;
    struct event *timer;
    struct net_backoff backoff; /* no connect attempt before backoff.retry_at_ms */
    uint64_t drops; /* connections (or attempts) lost so far */
    char *last_error;
    bool failure_shown; /* a failed attempt was logged since the last success */
    bool closing;
    struct net_resolver *resolver;
    struct metric_series *connected;
    struct metric_series *connect_failures;
    char script_sha[41]; /* hex SHA1 of commit_script; "" to always EVAL */
};

static void list_push(struct kv_list *l, struct kv_req *r)
{
    DLIST_APPEND(l, r);
}

static void list_remove(struct kv_list *l, struct kv_req *r)
{
    DLIST_REMOVE(l, r);
}

static struct kv_req *req_new(struct kv_dict *kd, kv_done_fn *done, int argc, const char **argv,
                              const size_t *argvlen)
{
    struct kv_req *req = xcalloc(1, sizeof(*req));
    req->kd = kd;
    req->done = done;
    int n = redisFormatCommandArgv(&req->cmd, argc, argv, argvlen);
    if (n < 0)
        petrel_fatal("out of memory formatting a kvstore command");
    req->cmd_len = (size_t)n;
    return req;
}

static void req_free(struct kv_req *req)
{
    if (req->cmd != NULL)
        redisFreeCommand(req->cmd);
    free(req);
}

static void set_gauge(struct kv_dict *kd, double v)
{
    if (kd->connected != NULL)
        metric_set(kd->connected, v);
}

static int64_t oldest_deadline(const struct kv_dict *kd)
{
    int64_t oldest = 0;
    if (kd->inflight.head != NULL)
        oldest = kd->inflight.head->deadline;
    if (kd->waiting.head != NULL && (oldest == 0 || kd->waiting.head->deadline < oldest))
        oldest = kd->waiting.head->deadline;
    return oldest;
}

static void timer_arm(struct kv_dict *kd)
{
    if (kd->timer == NULL || evtimer_pending(kd->timer, NULL))
        return;
    int64_t oldest = oldest_deadline(kd);
    if (oldest == 0)
        return;
    int64_t wait = oldest - clock_mono_ms();
    if (wait < 0)
        wait = 0;
    if (wait > KV_CLOSING_POLL_MS)
        wait = KV_CLOSING_POLL_MS;     /* also notices dict_registry_close() */
    int64_t usec = wait * 1000 + 1000; /* a millisecond late rather than early */
    struct timeval tv = {(time_t)(usec / 1000000), (suseconds_t)(usec % 1000000)};
    evtimer_add(kd->timer, &tv);
}

/* Answers every request of `l` (never sent) with `error`. */
static void fail_list(struct kv_list *l, const char *error)
{
    struct kv_req *req;
    while ((req = l->head) != NULL) {
        list_remove(l, req);
        req->done(req, NULL, error);
        req_free(req);
    }
}

static void format_error(const struct kv_dict *kd, char *dst, size_t size, const char *reason)
{
    snprintf(dst, size, "kvstore %.100s: %.380s", kd->cfg->address, reason);
}

/* The connection is gone (or never came up): remember why, schedule the
 * next attempt and fail what waited behind the handshake. The hiredis
 * context, if any, is already detached (kd->ac cleared by the caller or
 * being freed by hiredis). */
static void conn_down(struct kv_dict *kd, const char *reason)
{
    bool was_ready = kd->state == KV_READY;
    kd->state = KV_DOWN;
    kd->ac = NULL;
    kd->handshake_left = 0;
    kd->drops++;
    free(kd->last_error);
    kd->last_error = xstrdup(reason);
    set_gauge(kd, 0);
    if (!kd->closing) {
        net_backoff_failed(&kd->backoff, clock_mono_ms());
        char q[KV_ERR_SIZE];
        if (was_ready) {
            log_warn(COMPONENT, "kvstore connection lost", "dict=%s address=%s error=%s",
                     kd->dict->name, kd->cfg->address, log_quote(q, sizeof(q), reason));
            kd->failure_shown = false;
        } else {
            if (kd->connect_failures != NULL)
                metric_add(kd->connect_failures, 1);
            if (!kd->failure_shown)
                log_warn(COMPONENT, "kvstore connect failed", "dict=%s address=%s error=%s",
                         kd->dict->name, kd->cfg->address, log_quote(q, sizeof(q), reason));
            else
                log_debug(COMPONENT, "kvstore connect failed", "dict=%s address=%s error=%s",
                          kd->dict->name, kd->cfg->address, log_quote(q, sizeof(q), reason));
            kd->failure_shown = true;
        }
    }
    char msg[KV_ERR_SIZE];
    format_error(kd, msg, sizeof(msg), reason);
    fail_list(&kd->waiting, msg);
}

static void resolve_cancel(struct kv_dict *kd)
{
    if (kd->resolver != NULL)
        net_resolve_cancel(kd->resolver);
}

/* The driver drops the connection: requests handed to hiredis are answered
 * by it (NULL replies, reason from kd->last_error), the rest by conn_down. */
static void conn_fail(struct kv_dict *kd, const char *reason)
{
    redisAsyncContext *ac = kd->ac;
    resolve_cancel(kd);
    conn_down(kd, reason);
    if (ac != NULL)
        redisAsyncFree(ac); /* deferred by hiredis when inside one of its callbacks */
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct kv_req *req = privdata;
    struct kv_dict *kd = req->kd;
    redisReply *reply = r;
    list_remove(&kd->inflight, req);
    if (reply == NULL) {
        const char *reason = ac->c.err != 0 ? ac->c.errstr : kd->last_error;
        char why[KV_ERR_SIZE];
        snprintf(why, sizeof(why), "%s",
                 reason != NULL && *reason != '\0' ? reason : "connection closed");
        if (ac == kd->ac) /* hiredis is tearing the connection down */
            conn_down(kd, why);
        char msg[KV_ERR_SIZE];
        format_error(kd, msg, sizeof(msg), why);
        req->done(req, NULL, msg);
    } else {
        req->done(req, reply, NULL);
    }
    req_free(req);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct kv_dict *kd = ac->data;
    if (status == REDIS_OK || kd == NULL || ac != kd->ac)
        return;
    /* hiredis frees the context after this returns; pending handshake
     * requests then get NULL replies. */
    char why[KV_ERR_SIZE];
    snprintf(why, sizeof(why), "%s", ac->c.err != 0 ? ac->c.errstr : "connect failed");
    conn_down(kd, why);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct kv_dict *kd = ac->data;
    if (kd == NULL || ac != kd->ac)
        return;
    char why[KV_ERR_SIZE];
    snprintf(why, sizeof(why), "%s",
             status != REDIS_OK && ac->c.err != 0 ? ac->c.errstr : "connection closed");
    conn_down(kd, why);
}

static bool send_now(struct kv_dict *kd, struct kv_req *req)
{
    if (kd->ac == NULL ||
        redisAsyncFormattedCommand(kd->ac, on_reply, req, req->cmd, req->cmd_len) != REDIS_OK)
        return false;
    if (!req->keep_cmd) {
        redisFreeCommand(req->cmd);
        req->cmd = NULL;
    }
    req->sent = true;
    list_push(&kd->inflight, req);
    return true;
}

static void handshake_done(struct kv_req *req, const redisReply *reply, const char *error)
{
    struct kv_dict *kd = req->kd;
    (void)error;
    if (reply == NULL || kd->state != KV_HANDSHAKE)
        return; /* the connection went down; whoever noticed failed the waiters */
    if (reply->type == REDIS_REPLY_ERROR) {
        char why[KV_ERR_SIZE];
        snprintf(why, sizeof(why), "%s failed: %s", req->what, reply->str);
        conn_fail(kd, why);
        return;
    }
    if (--kd->handshake_left > 0)
        return;
    kd->state = KV_READY;
    net_backoff_reset(&kd->backoff);
    kd->failure_shown = false;
    set_gauge(kd, 1);
    log_info(COMPONENT, "kvstore connected", "dict=%s address=%s db=%" PRId64, kd->dict->name,
             kd->cfg->address, kd->cfg->db);
    struct kv_req *w;
    while (kd->state == KV_READY && (w = kd->waiting.head) != NULL) {
        list_remove(&kd->waiting, w);
        if (!send_now(kd, w)) {
            char msg[KV_ERR_SIZE];
            format_error(kd, msg, sizeof(msg), "cannot queue the command");
            w->done(w, NULL, msg);
            req_free(w);
        }
    }
}

static void handshake_send(struct kv_dict *kd, const char *what, int argc, const char **argv)
{
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct kv_req *req = req_new(kd, handshake_done, argc, argv, lens);
    req->what = what;
    req->deadline = clock_mono_ms() + kd->cfg->timeout_ms;
    if (!send_now(kd, req)) {
        req_free(req);
        return;
    }
    kd->handshake_left++;
}

/* Opens the hiredis connection to `ip` (NULL: the Unix socket). */
static bool conn_open(struct kv_dict *kd, const char *ip)
{
    const struct kv_config *cfg = kd->cfg;
    const struct sockaddr_un *sun = (const struct sockaddr_un *)&cfg->ep.addr.ss;
    redisAsyncContext *ac = cfg->ep.kind == NET_ENDPOINT_UNIX ? redisAsyncConnectUnix(sun->sun_path)
                                                              : redisAsyncConnect(ip, cfg->ep.port);
    if (ac == NULL) {
        conn_down(kd, "out of memory");
        return false;
    }
    if (ac->err != 0) {
        char why[KV_ERR_SIZE];
        snprintf(why, sizeof(why), "%s", ac->errstr != NULL ? ac->errstr : "connect failed");
        redisAsyncFree(ac);
        conn_down(kd, why);
        return false;
    }
    ac->data = kd;
    if (redisLibeventAttach(ac, kd->dict->base) != REDIS_OK) {
        redisAsyncFree(ac);
        conn_down(kd, "cannot attach to the event loop");
        return false;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (cfg->ep.kind != NET_ENDPOINT_UNIX)
        redisEnableKeepAlive(&ac->c);
    kd->ac = ac;
    kd->state = KV_HANDSHAKE;
    kd->handshake_left = 0;
    char db[24];
    snprintf(db, sizeof(db), "%" PRId64, cfg->db);
    if (cfg->password != NULL) {
        if (cfg->username != NULL)
            handshake_send(kd, "AUTH", 3, (const char *[]){"AUTH", cfg->username, cfg->password});
        else
            handshake_send(kd, "AUTH", 2, (const char *[]){"AUTH", cfg->password});
    }
    if (cfg->db != 0)
        handshake_send(kd, "SELECT", 2, (const char *[]){"SELECT", db});
    if (kd->handshake_left == 0)
        handshake_send(kd, "PING", 1, (const char *[]){"PING"});
    if (kd->handshake_left == 0) {
        conn_fail(kd, "cannot queue the handshake");
        return false;
    }
    timer_arm(kd);
    return true;
}

static void on_resolved(const struct net_addr *addr, const char *error, void *arg)
{
    struct kv_dict *kd = arg;
    if (addr == NULL) {
        conn_down(kd, error);
        return;
    }
    char ip[INET6_ADDRSTRLEN];
    net_addr_format_ip((const struct sockaddr *)&addr->ss, ip, sizeof(ip));
    conn_open(kd, ip);
}

/* Connects: an IP address or Unix socket at once, a host name once
 * resolved (net/resolve.h, on the loop). */
static bool resolve_start(struct kv_dict *kd)
{
    if (kd->resolver == NULL)
        kd->resolver = net_resolver_new(kd->dict->base);
    struct net_addr addr;
    char why[KV_ERR_SIZE];
    switch (
        net_resolve_start(kd->resolver, &kd->cfg->ep, &addr, why, sizeof(why), on_resolved, kd)) {
    case NET_RESOLVE_PENDING:
        kd->state = KV_RESOLVING;
        return true;
    case NET_RESOLVE_FAILED:
        conn_down(kd, why);
        return false;
    case NET_RESOLVE_DONE:
        break;
    }
    char ip[INET6_ADDRSTRLEN];
    net_addr_format_ip((const struct sockaddr *)&addr.ss, ip, sizeof(ip));
    return conn_open(kd, ip);
}

/* Starts a connection when the backoff allows; false with `err` filled. */
static bool conn_start(struct kv_dict *kd, char *err, size_t err_size)
{
    int64_t now = clock_mono_ms();
    if (net_backoff_remaining(&kd->backoff, now) > 0) {
        char why[KV_ERR_SIZE];
        snprintf(why, sizeof(why), "unavailable (%s; next connect attempt in %.1fs)",
                 kd->last_error != NULL ? kd->last_error : "down",
                 (double)net_backoff_remaining(&kd->backoff, now) / 1000.0);
        format_error(kd, err, err_size, why);
        return false;
    }
    bool ok = resolve_start(kd);
    if (!ok)
        format_error(kd, err, err_size, kd->last_error != NULL ? kd->last_error : "connect failed");
    return ok;
}

/* Hands `req` to the connection (connecting first when needed). False when
 * it cannot even be queued: `err` says why, the caller answers and frees
 * `req`. Never calls req->done itself. */
static bool kv_submit(struct kv_dict *kd, struct kv_req *req, char *err, size_t err_size)
{
    if (kd->closing || kd->dict->closing) {
        snprintf(err, err_size, "kvstore: dict is closing (shutting down)");
        return false;
    }
    if (kd->state == KV_DOWN && !conn_start(kd, err, err_size))
        return false;
    req->deadline = clock_mono_ms() + kd->cfg->timeout_ms;
    if (kd->state == KV_READY) {
        if (!send_now(kd, req)) {
            format_error(kd, err, err_size, "cannot queue the command");
            return false;
        }
    } else {
        list_push(&kd->waiting, req);
    }
    timer_arm(kd);
    return true;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct kv_dict *kd = arg;
    int64_t oldest = oldest_deadline(kd);
    if (oldest == 0)
        return;
    if (kd->dict->closing && !kd->closing) {
        kd->closing = true; /* no reconnects, no logging: shutting down */
        conn_fail(kd, "dict is closing (shutting down)");
    } else if (oldest <= clock_mono_ms() && kd->state != KV_DOWN) {
        char why[128];
        const char *stage = kd->state == KV_RESOLVING   ? "host name lookup"
                            : kd->state == KV_HANDSHAKE ? "connect"
                                                        : "reply";
        snprintf(why, sizeof(why), "no %s within %.3gs (connection reset)", stage,
                 (double)kd->cfg->timeout_ms / 1000.0);
        conn_fail(kd, why);
    }
    timer_arm(kd);
}

static void script_sha1(char out[41]);

static bool kv_open(struct dict *dict, struct petrel_error *err)
{
    struct kv_dict *kd = xcalloc(1, sizeof(*kd));
    kd->dict = dict;
    kd->cfg = dict->config;
    net_backoff_init(&kd->backoff, KV_BACKOFF_MIN_MS, KV_BACKOFF_MAX_MS);
    script_sha1(kd->script_sha);
    kd->timer = evtimer_new(dict->base, on_timer, kd);
    if (kd->timer == NULL) {
        free(kd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot create a timer");
    }
    if (dict->metrics != NULL) {
        static const char *const labels[] = {"dict", NULL};
        const char *values[] = {dict->name};
        kd->connected = metric_series_get(
            metrics_gauge(dict->metrics, "petrel_dict_kvstore_connected",
                          "1 while the kvstore dict's connection is up and authenticated.", labels),
            values);
        kd->connect_failures = metric_series_get(
            metrics_counter(dict->metrics, "petrel_dict_kvstore_connect_failures_total",
                            "Failed connection attempts (connect, lookup or handshake) of "
                            "kvstore dicts.",
                            labels),
            values);
    }
    dict->driver_data = kd;
    return true;
}

static void kv_close(struct dict *dict)
{
    struct kv_dict *kd = dict->driver_data;
    kd->closing = true;
    resolve_cancel(kd);
    redisAsyncContext *ac = kd->ac;
    conn_down(kd, "dict is closing"); /* fails the requests not sent yet */
    if (ac != NULL)
        redisAsyncFree(ac); /* answers the ones in flight */
    if (kd->timer != NULL)
        event_free(kd->timer);
    net_resolver_free(kd->resolver);
    free(kd->last_error);
    free(kd);
    dict->driver_data = NULL;
}

/* "<prefix><key>" into `b`. */
static void full_key(const struct kv_config *cfg, struct buf *b, const char *key)
{
    buf_reset(b);
    buf_append(b, cfg->prefix, cfg->prefix_len);
    buf_append_str(b, key);
}

static void reply_error_text(const struct kv_dict *kd, const redisReply *reply, char *dst,
                             size_t size)
{
    if (reply->type == REDIS_REPLY_ERROR)
        snprintf(dst, size, "kvstore %s: %s", kd->cfg->address, reply->str);
    else
        snprintf(dst, size, "kvstore %s: unexpected reply type %d", kd->cfg->address, reply->type);
}

/* ---------- lookup ---------- */

static void lookup_done(struct kv_req *req, const redisReply *reply, const char *error)
{
    struct dict_lookup_result r = {.ret = -1};
    struct dict_value v;
    char msg[KV_ERR_SIZE];
    if (error != NULL) {
        r.error = error;
    } else if (reply->type == REDIS_REPLY_NIL) {
        r.ret = 0;
    } else if (reply->type == REDIS_REPLY_STRING) {
        v.data = reply->str;
        v.len = reply->len;
        r.ret = 1;
        r.values = &v;
        r.value_count = 1;
    } else {
        reply_error_text(req->kd, reply, msg, sizeof(msg));
        r.error = msg;
    }
    req->lookup_cb(&r, req->cb_ctx);
}

static void kv_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct kv_dict *kd = dict->driver_data;
    struct buf k = {0};
    full_key(kd->cfg, &k, key);
    const char *argv[] = {"GET", k.data};
    size_t lens[] = {3, k.len};
    struct kv_req *req = req_new(kd, lookup_done, 2, argv, lens);
    buf_free(&k);
    req->lookup_cb = cb;
    req->cb_ctx = ctx;
    char err[KV_ERR_SIZE];
    if (!kv_submit(kd, req, err, sizeof(err))) {
        req_free(req);
        struct dict_lookup_result r = {.ret = -1, .error = err};
        cb(&r, ctx);
    }
}

/* ---------- commit ---------- */

/* KEYS[i] is the key of operation i; ARGV[1] the TTL in seconds ("0": none);
 * ARGV[2i] the kind of operation i ("s" set, "u" unset, "i" atomic-inc) and
 * ARGV[2i+1] its value or delta. Pass one checks every atomic-inc against
 * the state the batch itself produces (no writes); pass two applies.
 * Counters are split into two exact doubles (hi * 1e10 + lo) so the 64-bit
 * range check is exact in Lua 5.1. Returns {1} ok, {0} some atomic-inc
 * target missing, {-1, key} not an integer, {-2, key} overflow, {-3, key}
 * not a string value. */
static const char commit_script[] =
    "local E = 10000000000\n"
    "local function num(s)\n"
    "  if s ~= '0' and not string.find(s, '^%-?[1-9]%d*$') then return nil end\n"
    "  local neg = string.sub(s, 1, 1) == '-'\n"
    "  local d = neg and string.sub(s, 2) or s\n"
    "  local n = string.len(d)\n"
    "  if n > 19 or (n == 19 and d > (neg and '9223372036854775808' or "
    "'9223372036854775807')) then return nil end\n"
    "  local hi = n > 10 and tonumber(string.sub(d, 1, n - 10)) or 0\n"
    "  local lo = tonumber(string.sub(d, math.max(n - 9, 1)))\n"
    "  if neg then return -hi, -lo end\n"
    "  return hi, lo\n"
    "end\n"
    "local function add(h1, l1, h2, l2)\n"
    "  local h, l = h1 + h2, l1 + l2\n"
    "  local c = math.floor(l / E)\n"
    "  h, l = h + c, l - c * E\n"
    "  if h > 922337203 or (h == 922337203 and l > 6854775807) then return nil end\n"
    "  if h < -922337204 or (h == -922337204 and l < 3145224192) then return nil end\n"
    "  return h, l\n"
    "end\n"
    "local state, missing = {}, {}\n"
    "for i = 1, #KEYS do\n"
    "  local k, op, arg = KEYS[i], ARGV[2 * i], ARGV[2 * i + 1]\n"
    "  if op == 's' then\n"
    "    state[k] = arg\n"
    "  elseif op == 'u' then\n"
    "    state[k] = false\n"
    "  else\n"
    "    local v = state[k]\n"
    "    if v == nil then\n"
    "      v = redis.pcall('GET', k)\n"
    "      if type(v) == 'table' then return {-3, k} end\n"
    "    end\n"
    "    if v == false then\n"
    "      missing[i] = true\n"
    "    else\n"
    "      local h, l\n"
    "      if type(v) == 'table' then h, l = v[1], v[2] else h, l = num(v) end\n"
    "      if h == nil then return {-1, k} end\n"
    "      local dh, dl = num(arg)\n"
    "      if dh == nil then return {-1, k} end\n"
    "      h, l = add(h, l, dh, dl)\n"
    "      if h == nil then return {-2, k} end\n"
    "      state[k] = {h, l}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local result = 1\n"
    "for i = 1, #KEYS do\n"
    "  local k, op, arg = KEYS[i], ARGV[2 * i], ARGV[2 * i + 1]\n"
    "  if op == 's' then\n"
    "    if ARGV[1] == '0' then redis.call('SET', k, arg)\n"
    "    else redis.call('SET', k, arg, 'EX', ARGV[1]) end\n"
    "  elseif op == 'u' then\n"
    "    redis.call('DEL', k)\n"
    "  elseif missing[i] then\n"
    "    result = 0\n"
    "  else\n"
    "    redis.call('INCRBY', k, arg)\n"
    "  end\n"
    "end\n"
    "return {result}\n";

/* Hex SHA1 of commit_script, EVALSHA's name for it, into `out`; "" when the
 * digest is unavailable (commits then send the script itself, EVAL). */
static void script_sha1(char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    out[0] = '\0';
    if (EVP_Digest(commit_script, sizeof(commit_script) - 1, md, &md_len, EVP_sha1(), NULL) != 1 ||
        md_len != 20)
        return;
    static const char hex[] = "0123456789abcdef";
    for (unsigned int i = 0; i < md_len; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 0x0f];
    }
    out[2 * md_len] = '\0';
}

/* A commit answered without a reply: it may have run if it was sent. */
static void commit_lost(struct kv_req *req, const char *error)
{
    req->commit_cb(req->sent ? DICT_COMMIT_WRITE_UNCERTAIN : DICT_COMMIT_FAILED, error,
                   req->cb_ctx);
}

static void commit_done(struct kv_req *req, const redisReply *reply, const char *error);

/* The EVAL form of the formatted EVALSHA commit of `req` (the same
 * arguments, the script in place of its SHA1); NULL if the command does not
 * parse, which redisFormatCommandArgv's output always does. */
static struct kv_req *eval_req_from(struct kv_req *req)
{
    const char *p = req->cmd;
    const char *end = p != NULL ? p + req->cmd_len : NULL;
    char *e;
    if (p == NULL || *p != '*')
        return NULL;
    long argc = strtol(p + 1, &e, 10);
    if (argc < 3 || argc > INT32_MAX || end - e < 2 || e[0] != '\r' || e[1] != '\n')
        return NULL;
    p = e + 2;
    const char **argv = xcalloc((size_t)argc, sizeof(*argv));
    size_t *lens = xcalloc((size_t)argc, sizeof(*lens));
    struct kv_req *eval = NULL;
    for (long i = 0; i < argc; i++) {
        if (p >= end || *p != '$')
            goto out;
        unsigned long long n = strtoull(p + 1, &e, 10);
        if (end - e < 4 || e[0] != '\r' || e[1] != '\n' || n > (size_t)(end - e - 4))
            goto out;
        argv[i] = e + 2;
        lens[i] = (size_t)n;
        p = e + 2 + n + 2;
    }
    argv[0] = "EVAL";
    lens[0] = 4;
    argv[1] = commit_script;
    lens[1] = sizeof(commit_script) - 1;
    eval = req_new(req->kd, commit_done, (int)argc, argv, lens);
    eval->commit_cb = req->commit_cb;
    eval->cb_ctx = req->cb_ctx;
out:
    free(argv);
    free(lens);
    return eval;
}

/* EVALSHA found no script under that SHA1: nothing ran. The same commit
 * goes out again as EVAL, behind whatever is in flight already. */
static void commit_retry_eval(struct kv_req *req)
{
    struct kv_dict *kd = req->kd;
    log_debug(COMPONENT, "kvstore script not cached, sending it", "dict=%s address=%s",
              kd->dict->name, kd->cfg->address);
    struct kv_req *eval = eval_req_from(req);
    char err[KV_ERR_SIZE];
    if (eval == NULL) {
        format_error(kd, err, sizeof(err), "NOSCRIPT, and the commit cannot be resent");
        req->commit_cb(DICT_COMMIT_FAILED, err, req->cb_ctx);
        return;
    }
    if (!kv_submit(kd, eval, err, sizeof(err))) {
        req_free(eval);
        req->commit_cb(DICT_COMMIT_FAILED, err, req->cb_ctx); /* nothing ran */
    }
}

static void commit_done(struct kv_req *req, const redisReply *reply, const char *error)
{
    const struct kv_config *cfg = req->kd->cfg;
    if (error != NULL) {
        commit_lost(req, error);
        return;
    }
    if (req->keep_cmd && reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
        memcmp(reply->str, "NOSCRIPT", 8) == 0) {
        commit_retry_eval(req);
        return;
    }
    char msg[KV_ERR_SIZE];
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER) {
        reply_error_text(req->kd, reply, msg, sizeof(msg));
        req->commit_cb(DICT_COMMIT_FAILED, msg, req->cb_ctx);
        return;
    }
    long long code = reply->element[0]->integer;
    if (code == 1 || code == 0) {
        req->commit_cb(code == 1 ? DICT_COMMIT_OK : DICT_COMMIT_NOT_FOUND, NULL, req->cb_ctx);
        return;
    }
    const char *key = "?";
    int key_len = 1;
    if (reply->elements >= 2 && reply->element[1]->type == REDIS_REPLY_STRING) {
        key = reply->element[1]->str;
        key_len = (int)reply->element[1]->len;
        if ((size_t)key_len >= cfg->prefix_len && memcmp(key, cfg->prefix, cfg->prefix_len) == 0) {
            key += cfg->prefix_len;
            key_len -= (int)cfg->prefix_len;
        }
    }
    if (key_len > 200)
        key_len = 200;
    if (code == -1)
        snprintf(msg, sizeof(msg), "atomic-inc: value of %.*s is not an integer", key_len, key);
    else if (code == -2)
        snprintf(msg, sizeof(msg), "atomic-inc: %.*s would overflow a 64-bit counter", key_len,
                 key);
    else
        snprintf(msg, sizeof(msg), "atomic-inc: %.*s holds a non-string kvstore value", key_len,
                 key);
    req->commit_cb(DICT_COMMIT_FAILED, msg, req->cb_ctx);
}

/* SET answers +OK, DEL the number of keys removed (0 for a missing key is
 * still OK, as in the script); anything else is an error reply. */
static void commit_single_done(struct kv_req *req, const redisReply *reply, const char *error)
{
    if (error != NULL) {
        commit_lost(req, error);
        return;
    }
    if (reply->type == REDIS_REPLY_INTEGER ||
        (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0)) {
        req->commit_cb(DICT_COMMIT_OK, NULL, req->cb_ctx);
        return;
    }
    char msg[KV_ERR_SIZE];
    reply_error_text(req->kd, reply, msg, sizeof(msg));
    req->commit_cb(DICT_COMMIT_FAILED, msg, req->cb_ctx);
}

/* One set or one unset: a single command, atomic without the script. */
static struct kv_req *single_req(struct kv_dict *kd, const struct dict_tx_op *op,
                                 int64_t expire_secs)
{
    struct buf k = {0};
    full_key(kd->cfg, &k, op->key);
    struct kv_req *req;
    if (op->kind == DICT_OP_UNSET) {
        const char *argv[] = {"DEL", k.data};
        size_t lens[] = {3, k.len};
        req = req_new(kd, commit_single_done, 2, argv, lens);
    } else {
        char ttl[24];
        snprintf(ttl, sizeof(ttl), "%" PRId64, expire_secs);
        const char *argv[] = {"SET", k.data, op->value != NULL ? op->value : "", "EX", ttl};
        size_t lens[] = {3, k.len, op->value != NULL ? op->value_len : 0, 2, strlen(ttl)};
        req = req_new(kd, commit_single_done, expire_secs > 0 ? 5 : 3, argv, lens);
    }
    buf_free(&k);
    return req;
}

/* EVALSHA sha numkeys key... ttl (kind arg)... (EVAL script ... without a
 * SHA1). */
static struct kv_req *script_req(struct kv_dict *kd, const struct dict_tx_op *ops, size_t count,
                                 int64_t expire_secs)
{
    const struct kv_config *cfg = kd->cfg;
    bool by_sha = kd->script_sha[0] != '\0';
    size_t argc = 3 + count + 1 + 2 * count;
    const char **argv = xcalloc(argc, sizeof(*argv));
    size_t *lens = xcalloc(argc, sizeof(*lens));
    char **owned = xcalloc(2 * count, sizeof(*owned));
    char numkeys[24];
    char ttl[24];
    snprintf(numkeys, sizeof(numkeys), "%zu", count);
    snprintf(ttl, sizeof(ttl), "%" PRId64, expire_secs > 0 ? expire_secs : 0);
    size_t a = 0;
    if (by_sha) {
        argv[a] = "EVALSHA";
        lens[a++] = 7;
        argv[a] = kd->script_sha;
        lens[a++] = strlen(kd->script_sha);
    } else {
        argv[a] = "EVAL";
        lens[a++] = 4;
        argv[a] = commit_script;
        lens[a++] = sizeof(commit_script) - 1;
    }
    argv[a] = numkeys;
    lens[a++] = strlen(numkeys);
    for (size_t i = 0; i < count; i++) {
        size_t klen = strlen(ops[i].key);
        char *k = xmalloc(cfg->prefix_len + klen + 1);
        memcpy(k, cfg->prefix, cfg->prefix_len);
        memcpy(k + cfg->prefix_len, ops[i].key, klen + 1);
        owned[i] = k;
        argv[a] = k;
        lens[a++] = cfg->prefix_len + klen;
    }
    argv[a] = ttl;
    lens[a++] = strlen(ttl);
    for (size_t i = 0; i < count; i++) {
        const struct dict_tx_op *op = &ops[i];
        switch (op->kind) {
        case DICT_OP_SET:
            argv[a] = "s";
            lens[a++] = 1;
            argv[a] = op->value != NULL ? op->value : "";
            lens[a++] = op->value != NULL ? op->value_len : 0;
            break;
        case DICT_OP_UNSET:
            argv[a] = "u";
            lens[a++] = 1;
            argv[a] = "";
            lens[a++] = 0;
            break;
        case DICT_OP_INC:
            owned[count + i] = xasprintf("%" PRId64, op->delta);
            argv[a] = "i";
            lens[a++] = 1;
            argv[a] = owned[count + i];
            lens[a++] = strlen(owned[count + i]);
            break;
        }
    }
    struct kv_req *req = req_new(kd, commit_done, (int)argc, argv, lens);
    req->keep_cmd = by_sha;
    for (size_t i = 0; i < 2 * count; i++)
        free(owned[i]);
    free(owned);
    free(argv);
    free(lens);
    return req;
}

static void kv_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                      int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    struct kv_dict *kd = dict->driver_data;
    if (expire_secs > KV_MAX_EXPIRE_SECS)
        expire_secs = KV_MAX_EXPIRE_SECS;
    struct kv_req *req = count == 1 && ops[0].kind != DICT_OP_INC
                             ? single_req(kd, &ops[0], expire_secs)
                             : script_req(kd, ops, count, expire_secs);
    req->commit_cb = cb;
    req->cb_ctx = ctx;
    char err[KV_ERR_SIZE];
    if (!kv_submit(kd, req, err, sizeof(err))) {
        req_free(req);
        cb(DICT_COMMIT_FAILED, err, ctx);
    }
}

static void kv_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    (void)dict;
    cb(true, NULL, ctx); /* native TTL: Redis expires keys itself */
}

/* ---------- iterate ---------- */

enum kv_iter_state {
    IT_ROWS, /* serving the current batch; fetch the next one when it is empty */
    IT_WAIT, /* a command is in flight */
    IT_DONE,
    IT_ERROR,
};

struct kv_entry {
    char *key;   /* full key (with the configured prefix) */
    char *value; /* NULL: not read yet, deleted since the SCAN, or not a string */
    size_t len;
};

struct kv_iterate {
    struct dict_iterate head;
    struct kv_dict *kd;
    enum kv_iter_state state;
    struct kv_req *req; /* in flight, or NULL */
    uint64_t drops;     /* kd->drops when the iteration began */
    char *match;        /* SCAN pattern */
    char cursor[32];
    bool scan_done;
    bool need_values;
    bool sorted;
    bool notify; /* WAIT was returned: notify when progress is possible */
    /* the current batch */
    struct kv_entry *batch;
    size_t count;
    size_t cap;
    size_t next;
    struct dict_value cur;
    /* sorted iterates */
    struct dict_row_buffer buffer;
    const char *prev_key;
};

static void batch_clear(struct kv_iterate *it)
{
    for (size_t i = 0; i < it->count; i++) {
        free(it->batch[i].key);
        free(it->batch[i].value);
    }
    it->count = 0;
    it->next = 0;
}

static void batch_add(struct kv_iterate *it, const char *key, size_t key_len)
{
    it->batch = xgrow(it->batch, &it->cap, it->count + 1, sizeof(*it->batch));
    struct kv_entry *e = &it->batch[it->count++];
    e->key = xstrndup(key, key_len);
    e->value = NULL;
    e->len = 0;
}

/* Wakes the consumer when it is waiting. Must be the caller's last action:
 * the consumer may deinit the iterator from inside. */
static void iter_wake(struct kv_iterate *it)
{
    if (!it->notify)
        return;
    it->notify = false;
    dict_iterate_notify(&it->head);
}

static void iter_fail(struct kv_iterate *it, const char *msg)
{
    dict_iterate_set_error(&it->head, "%s", msg);
    it->state = IT_ERROR;
    iter_wake(it);
}

static void iter_fetch(struct kv_iterate *it);

/* The current batch is complete (keys and, when needed, values). */
static void iter_batch_ready(struct kv_iterate *it)
{
    const struct kv_config *cfg = it->kd->cfg;
    if (it->sorted) {
        for (size_t i = 0; i < it->count; i++) {
            const struct kv_entry *e = &it->batch[i];
            if (it->need_values && e->value == NULL)
                continue;
            struct dict_value v = {e->value, e->len};
            dict_row_buffer_add(&it->buffer, e->key + cfg->prefix_len, &v, it->need_values ? 1 : 0);
        }
        batch_clear(it);
        if (!it->scan_done) {
            iter_fetch(it);
            return;
        }
        dict_row_buffer_sort(&it->buffer, it->head.flags);
        it->state = IT_DONE;
    } else if (it->count == 0 && !it->scan_done) {
        iter_fetch(it);
        return;
    } else {
        it->state = it->count > 0 ? IT_ROWS : IT_DONE;
    }
    iter_wake(it);
}

static void iter_mget_reply(struct kv_req *req, const redisReply *reply, const char *error)
{
    struct kv_iterate *it = req->owner;
    if (it == NULL)
        return; /* the iterator went away */
    it->req = NULL;
    if (error != NULL) {
        iter_fail(it, error);
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != it->count) {
        char msg[KV_ERR_SIZE];
        reply_error_text(it->kd, reply, msg, sizeof(msg));
        iter_fail(it, msg);
        return;
    }
    for (size_t i = 0; i < it->count; i++) {
        const redisReply *v = reply->element[i];
        if (v->type != REDIS_REPLY_STRING)
            continue; /* deleted since the SCAN, or not a string */
        it->batch[i].value = xmalloc(v->len + 1);
        memcpy(it->batch[i].value, v->str, v->len);
        it->batch[i].value[v->len] = '\0';
        it->batch[i].len = v->len;
    }
    iter_batch_ready(it);
}

static void iter_send_mget(struct kv_iterate *it)
{
    size_t argc = it->count + 1;
    const char **argv = xcalloc(argc, sizeof(*argv));
    size_t *lens = xcalloc(argc, sizeof(*lens));
    argv[0] = "MGET";
    lens[0] = 4;
    for (size_t i = 0; i < it->count; i++) {
        argv[i + 1] = it->batch[i].key;
        lens[i + 1] = strlen(it->batch[i].key);
    }
    struct kv_req *req = req_new(it->kd, iter_mget_reply, (int)argc, argv, lens);
    free(argv);
    free(lens);
    req->owner = it;
    char err[KV_ERR_SIZE];
    if (!kv_submit(it->kd, req, err, sizeof(err))) {
        req_free(req);
        iter_fail(it, err);
        return;
    }
    it->req = req;
}

/* The iteration a reply is for: NULL when it was let go, or when the
 * reply is an error (the iteration has then failed with it). */
static struct kv_iterate *iter_reply_owner(struct kv_req *req, const char *error)
{
    struct kv_iterate *it = req->owner;
    if (it == NULL)
        return NULL;
    it->req = NULL;
    if (error != NULL) {
        iter_fail(it, error);
        return NULL;
    }
    return it;
}

static void iter_scan_reply(struct kv_req *req, const redisReply *reply, const char *error)
{
    struct kv_iterate *it = iter_reply_owner(req, error);
    if (it == NULL)
        return;
    char msg[KV_ERR_SIZE];
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[0]->len >= sizeof(it->cursor) ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        reply_error_text(it->kd, reply, msg, sizeof(msg));
        iter_fail(it, msg);
        return;
    }
    memcpy(it->cursor, reply->element[0]->str, reply->element[0]->len);
    it->cursor[reply->element[0]->len] = '\0';
    it->scan_done = strcmp(it->cursor, "0") == 0;
    const struct kv_config *cfg = it->kd->cfg;
    const redisReply *keys = reply->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING || k->len < cfg->prefix_len ||
            memchr(k->str, '\0', k->len) != NULL ||
            memcmp(k->str, cfg->prefix, cfg->prefix_len) != 0)
            continue;
        if (dict_iter_key_wanted(it->head.prefix, k->str + cfg->prefix_len, it->head.flags))
            batch_add(it, k->str, k->len);
    }
    if (it->need_values && it->count > 0) {
        iter_send_mget(it);
        return;
    }
    iter_batch_ready(it);
}

static void iter_get_reply(struct kv_req *req, const redisReply *reply, const char *error)
{
    struct kv_iterate *it = iter_reply_owner(req, error);
    if (it == NULL)
        return;
    it->scan_done = true;
    if (reply->type == REDIS_REPLY_STRING) {
        struct buf k = {0};
        full_key(it->kd->cfg, &k, it->head.prefix);
        batch_add(it, k.data, k.len);
        buf_free(&k);
        it->batch[0].value = xmalloc(reply->len + 1);
        memcpy(it->batch[0].value, reply->str, reply->len);
        it->batch[0].value[reply->len] = '\0';
        it->batch[0].len = reply->len;
    } else if (reply->type != REDIS_REPLY_NIL) {
        char msg[KV_ERR_SIZE];
        reply_error_text(it->kd, reply, msg, sizeof(msg));
        iter_fail(it, msg);
        return;
    }
    iter_batch_ready(it);
}

/* Sends the next command of the iteration (state becomes WAIT or ERROR). */
static void iter_fetch(struct kv_iterate *it)
{
    struct kv_dict *kd = it->kd;
    char err[KV_ERR_SIZE];
    if (kd->drops != it->drops) {
        char why[KV_ERR_SIZE];
        snprintf(why, sizeof(why), "connection lost during the iteration (%s)",
                 kd->last_error != NULL ? kd->last_error : "unknown");
        format_error(kd, err, sizeof(err), why);
        iter_fail(it, err);
        return;
    }
    struct kv_req *req;
    if ((it->head.flags & DICT_ITER_EXACT_KEY) != 0) {
        struct buf k = {0};
        full_key(kd->cfg, &k, it->head.prefix);
        const char *argv[] = {"GET", k.data};
        size_t lens[] = {3, k.len};
        req = req_new(kd, iter_get_reply, 2, argv, lens);
        buf_free(&k);
    } else {
        const char *argv[] = {"SCAN", it->cursor, "MATCH", it->match, "COUNT", KV_SCAN_COUNT};
        size_t lens[6];
        for (size_t i = 0; i < 6; i++)
            lens[i] = strlen(argv[i]);
        req = req_new(kd, iter_scan_reply, 6, argv, lens);
    }
    req->owner = it;
    it->state = IT_WAIT;
    if (!kv_submit(kd, req, err, sizeof(err))) {
        req_free(req);
        iter_fail(it, err);
        return;
    }
    it->req = req;
}

static void glob_escape(struct buf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            buf_append_char(b, '\\');
        buf_append_char(b, c);
    }
}

static struct dict_iterate *kv_iterate_init(struct dict *dict, const char *prefix, unsigned flags)
{
    struct kv_dict *kd = dict->driver_data;
    struct kv_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    it->kd = kd;
    it->drops = kd->drops;
    it->state = IT_ROWS;
    snprintf(it->cursor, sizeof(it->cursor), "0");
    it->need_values = (flags & DICT_ITER_NO_VALUE) == 0 || (flags & DICT_ITER_SORT_BY_VALUE) != 0;
    it->sorted = (flags & (DICT_ITER_SORT_BY_KEY | DICT_ITER_SORT_BY_VALUE)) != 0 &&
                 (flags & DICT_ITER_EXACT_KEY) == 0;
    struct buf m = {0};
    glob_escape(&m, kd->cfg->prefix, kd->cfg->prefix_len);
    glob_escape(&m, prefix, strlen(prefix));
    buf_append_char(&m, '*');
    it->match = buf_steal(&m);
    return &it->head;
}

static enum dict_iter_status kv_iterate_next(struct dict_iterate *head, struct dict_row *row)
{
    struct kv_iterate *it = (struct kv_iterate *)head;
    const struct kv_config *cfg = it->kd->cfg;
    for (;;) {
        switch (it->state) {
        case IT_ERROR:
            return DICT_ITER_ERROR;
        case IT_WAIT:
            it->notify = true;
            return DICT_ITER_WAIT;
        case IT_DONE:
            if (!it->sorted)
                return DICT_ITER_DONE;
            while (dict_row_buffer_next(&it->buffer, row)) {
                if (it->prev_key != NULL && strcmp(it->prev_key, row->key) == 0)
                    continue; /* SCAN reported the key twice */
                it->prev_key = row->key;
                return DICT_ITER_ROW;
            }
            return DICT_ITER_DONE;
        case IT_ROWS:
            while (it->next < it->count) {
                const struct kv_entry *e = &it->batch[it->next++];
                if (it->need_values && e->value == NULL)
                    continue;
                row->key = e->key + cfg->prefix_len;
                if (it->need_values) {
                    it->cur.data = e->value;
                    it->cur.len = e->len;
                    row->values = &it->cur;
                    row->value_count = 1;
                } else {
                    row->values = NULL;
                    row->value_count = 0;
                }
                return DICT_ITER_ROW;
            }
            batch_clear(it);
            if (it->scan_done) {
                it->state = IT_DONE;
                continue;
            }
            iter_fetch(it); /* WAIT, or ERROR when it could not be sent */
            continue;
        }
    }
}

static void kv_iterate_deinit(struct dict_iterate *head)
{
    struct kv_iterate *it = (struct kv_iterate *)head;
    if (it->req != NULL)
        it->req->owner = NULL; /* its reply is dropped */
    batch_clear(it);
    free(it->batch);
    dict_row_buffer_free(&it->buffer);
    free(it->match);
    free(it);
}

const struct dict_driver_ops dict_driver_kvstore = {
    .name = "kvstore",
    .multi_value = false,
    .config_read = kv_config_read,
    .config_free = kv_config_free,
    .open = kv_open,
    .close = kv_close,
    .lookup = kv_lookup,
    .iterate_init = kv_iterate_init,
    .iterate_next = kv_iterate_next,
    .iterate_deinit = kv_iterate_deinit,
    .commit = kv_commit,
    .expire_scan = kv_expire_scan,
};
