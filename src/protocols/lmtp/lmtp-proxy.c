/* The LMTP front of the login proxy (see lmtp-proxy.h): the front hooks of
 * the LMTP server, each recipient's route (userdb, director, backend
 * transaction), the answers after DATA, the metrics.
 *
 * The client is answered from the loop only (the transaction's `defer`
 * event), never from inside a backend's callback: the answer may let the
 * session run its next command, and a RSET there frees the transaction and
 * its backends, which must not happen under a backend's feet. */
#include "protocols/lmtp/lmtp-proxy-private.h"

#include "clients/ring/director-client.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/lmtp/lmtp-server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- metrics ---------- */

/* petrel_login_sessions{lmtp}: the front's client connections, read when
 * the metrics are rendered. */
static void sessions_collect(void *arg)
{
    struct lmtp_proxy *p = arg;
    metric_set(p->m.sessions, (double)lmtp_server_sessions(p->srv));
}

/* ---------- the transaction ---------- */

static void defer_cb(evutil_socket_t fd, short what, void *arg);
static void relookup_cb(evutil_socket_t fd, short what, void *arg);

static struct lmtp_proxy_txn *txn_of(struct lmtp_proxy *p, struct lmtp_session *s)
{
    if (s->front_state == NULL) {
        struct lmtp_proxy_txn *t = xcalloc(1, sizeof(*t));
        t->p = p;
        t->s = s;
        t->defer = event_new(p->base, -1, 0, defer_cb, t);
        t->relookup = evtimer_new(p->base, relookup_cb, t);
        s->front_state = t;
    }
    return s->front_state;
}

static void pending_end(struct lmtp_proxy_txn *t)
{
    lmtp_recipient_name_free(&t->name);
    free(t->user);
    t->user = NULL;
    free(t->tag);
    t->tag = NULL;
    t->pending = false;
    t->waiting = NULL;
    event_active(t->defer, EV_TIMEOUT, 0); /* the session reads on */
}

/* Writes `line` ("451 4.4.1 text") with "<address>" after its codes, the
 * form every answer of the LMTP server has. */
static void reply_with_address(struct lmtp_session *s, const char *line, const char *address)
{
    const char *sp = strchr(line, ' ');
    if (sp == NULL) {
        lmtp_reply(s, "%s <%s>", line, address);
        return;
    }
    const char *rest = sp + 1;
    const char *sp2 = strchr(rest, ' ');
    bool enhanced = rest[0] >= '2' && rest[0] <= '5' && rest[1] == '.' && sp2 != NULL;
    int head = (int)((enhanced ? sp2 : sp) - line);
    const char *tail = (enhanced ? sp2 : sp) + 1;
    lmtp_reply(s, "%.*s <%s> %s", head, line, address, tail);
}

static void answer_rcpt(struct lmtp_proxy_txn *t, int counted, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer_rcpt(struct lmtp_proxy_txn *t, int counted, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    lmtp_reply(t->s, "%s", line);
    if (counted >= 0)
        login_metrics_result(&t->p->m, (enum login_result)counted);
    pending_end(t);
}

static void route_to(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b)
{
    switch (b->state) {
    case LMTP_PROXY_B_READY:
        t->waiting = b;
        lmtp_proxy_backend_rcpt(b, t->name.address);
        return;
    case LMTP_PROXY_B_SETUP:
    case LMTP_PROXY_B_RETRY:
        t->waiting = b; /* lmtp_proxy_txn_backend_ready/failed go on */
        return;
    case LMTP_PROXY_B_FAILED:
        t->waiting = b;
        lmtp_proxy_txn_backend_failed(t, b);
        return;
    default:
        answer_rcpt(t, LOGIN_RESULT_UNAVAILABLE, "451 4.3.0 <%s> Internal error, try again later",
                    t->name.address);
        return;
    }
}

static void lookup_done(void *arg, const struct director_lookup_result *res)
{
    struct lmtp_proxy_txn *t = arg;
    struct lmtp_proxy *p = t->p;
    t->lookup = NULL;
    char user[300];
    log_quote(user, sizeof(user), t->user);
    /* A user being moved (the director answers `killing` until the old
     * backend's sessions are gone): ask again after retry_ms while the
     * phase's deadline allows, so the message goes to the new backend. */
    int64_t left_ms = p->deps.director_timeout_ms - (clock_mono_us() - t->lookup_start_us) / 1000;
    if (!res->ok && res->outcome == RING_OUTCOME_KILLING && (int64_t)res->retry_ms < left_ms) {
        int64_t ms = res->retry_ms > 0 ? res->retry_ms : 50;
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        evtimer_add(t->relookup, &tv);
        return;
    }
    login_metrics_phase(&p->m, LOGIN_PHASE_DIRECTOR_LOOKUP, t->lookup_start_us);
    if (!res->ok) {
        char why[300];
        log_quote(why, sizeof(why),
                  res->error != NULL ? res->error : ring_outcome_name(res->outcome));
        log_warn(LMTP_PROXY_COMPONENT, "director lookup failed", "session=%s user=%s error=%s",
                 t->s->id, user, why);
        answer_rcpt(t, LOGIN_RESULT_UNAVAILABLE,
                    "451 4.4.3 <%s> No route to the user's backend, try "
                    "again later",
                    t->name.address);
        return;
    }
    unsigned port = (unsigned)p->cfg->backend_port;
    log_debug(LMTP_PROXY_COMPONENT, "recipient routed", "session=%s user=%s backend=%s:%u",
              t->s->id, user, res->ip, port);
    struct lmtp_proxy_backend *b = t->backends;
    while (b != NULL && !(strcmp(b->ip, res->ip) == 0 && b->port == port))
        b = b->next;
    if (b == NULL) {
        b = lmtp_proxy_backend_new(t, res->ip, port);
        b->next = t->backends;
        t->backends = b;
    }
    route_to(t, b);
}

static void relookup_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lmtp_proxy_txn *t = arg;
    t->lookup = director_client_lookup(t->p->deps.directors, t->user, t->tag, lookup_done, t);
}

static const char *director_tag(const struct userdb_entry *e)
{
    for (size_t i = 0; e != NULL && i < e->extra_count; i++) {
        if (strcmp(e->extra[i].key, "director_tag") == 0)
            return e->extra[i].value;
    }
    return "";
}

static void user_done(const struct auth_client_reply *reply, void *arg)
{
    struct lmtp_proxy_txn *t = arg;
    t->auth_req = NULL;
    char addr[300];
    log_quote(addr, sizeof(addr), t->name.address);
    switch (reply->status) {
    case AUTH_CLIENT_OK:
        t->user = xstrdup(reply->user);
        t->tag = xstrdup(director_tag(reply->userdb));
        t->lookup_start_us = clock_mono_us();
        t->lookup = director_client_lookup(t->p->deps.directors, t->user, t->tag, lookup_done, t);
        return;
    case AUTH_CLIENT_NOT_FOUND:
    case AUTH_CLIENT_FAIL:
        log_info(LMTP_PROXY_COMPONENT, "unknown recipient", "session=%s rcpt=%s", t->s->id, addr);
        answer_rcpt(t, -1, "550 5.1.1 <%s> User doesn't exist here", t->name.address);
        return;
    default:
        log_warn(LMTP_PROXY_COMPONENT, "recipient lookup failed", "session=%s rcpt=%s", t->s->id,
                 addr);
        answer_rcpt(t, -1, "451 4.3.0 <%s> Temporary user lookup failure", t->name.address);
        return;
    }
}

static void front_rcpt(void *arg, struct lmtp_session *s, struct lmtp_recipient_name *name)
{
    struct lmtp_proxy *p = arg;
    struct lmtp_proxy_txn *t = txn_of(p, s);
    t->name = *name;
    memset(name, 0, sizeof(*name));
    t->pending = true;
    /* The callback never runs inside auth_client_user (auth-client.h). */
    t->auth_req = auth_client_user(lmtp_server_context(p->srv)->auth, t->name.lookup, user_done, t);
}

void lmtp_proxy_txn_backend_ready(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b)
{
    if (t->pending && t->waiting == b)
        lmtp_proxy_backend_rcpt(b, t->name.address);
}

void lmtp_proxy_txn_backend_failed(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b)
{
    if (!t->pending || t->waiting != b)
        return; /* its recipients are answered at DATA */
    bool temporary = b->fail[0] == '4';
    login_metrics_result(&t->p->m,
                         temporary ? LOGIN_RESULT_UNAVAILABLE : LOGIN_RESULT_BACKEND_REJECTED);
    reply_with_address(t->s, b->fail, t->name.address);
    pending_end(t);
}

void lmtp_proxy_txn_backend_rcpt(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b, int code,
                                 const char *line)
{
    struct lmtp_session *s = t->s;
    if (!t->pending || t->waiting != b)
        return;
    lmtp_reply(s, "%s", line);
    if (code / 100 == 2) {
        size_t i = s->rcpt_count;
        lmtp_session_rcpt_add(s, &t->name, t->user, SIZE_MAX);
        t->routes = xgrow(t->routes, &t->route_cap, i + 1, sizeof(*t->routes));
        t->routes[i].b = b;
        t->routes[i].k = b->accepted++;
        login_metrics_result(&t->p->m, LOGIN_RESULT_OK);
    } else {
        login_metrics_result(&t->p->m, LOGIN_RESULT_BACKEND_REJECTED);
    }
    pending_end(t);
}

void lmtp_proxy_txn_backend_done(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b)
{
    (void)b;
    if (t->data_busy > 0 && --t->data_busy == 0)
        event_active(t->defer, EV_TIMEOUT, 0);
}

/* One reply per RCPT, in order (RFC 2033 4.2), each its backend's. */
static void answer_data(struct lmtp_proxy_txn *t)
{
    struct lmtp_session *s = t->s;
    for (size_t i = 0; i < s->rcpt_count; i++) {
        const struct lmtp_rcpt *r = &s->rcpts[i];
        size_t j = r->dup_of != SIZE_MAX ? r->dup_of : i;
        const struct lmtp_proxy_route *route = j < t->route_cap ? &t->routes[j] : NULL;
        const struct lmtp_proxy_backend *b = route != NULL ? route->b : NULL;
        if (b != NULL && route->k < b->result_count)
            lmtp_reply(s, "%s", b->results[route->k]);
        else if (b != NULL && b->fail[0] != '\0')
            reply_with_address(s, b->fail, r->name.address);
        else
            lmtp_reply(s, "451 4.4.2 <%s> Backend connection lost, try again later",
                       r->name.address);
    }
}

static void defer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lmtp_proxy_txn *t = arg;
    struct lmtp_session *s = t->s;
    if (!t->forwarding) {
        lmtp_session_resume(s);
        return;
    }
    if (t->data_busy > 0)
        return;
    answer_data(t);
    lmtp_session_transaction_done(s); /* frees t (front_reset) */
}

static void front_data(void *arg, struct lmtp_session *s)
{
    struct lmtp_proxy_txn *t = txn_of(arg, s);
    t->forwarding = true;
    t->data_busy = 0;
    for (struct lmtp_proxy_backend *b = t->backends; b != NULL; b = b->next) {
        if (b->state == LMTP_PROXY_B_READY && b->accepted > 0)
            t->data_busy++;
    }
    /* Counted first: a backend failing at once counts itself down. */
    size_t started = t->data_busy;
    for (struct lmtp_proxy_backend *b = t->backends; b != NULL && started > 0; b = b->next) {
        if (b->state == LMTP_PROXY_B_READY && b->accepted > 0) {
            started--;
            lmtp_proxy_backend_data(b);
        }
    }
    if (t->data_busy == 0)
        event_active(t->defer, EV_TIMEOUT, 0);
}

static void front_reset(void *arg, struct lmtp_session *s)
{
    (void)arg;
    struct lmtp_proxy_txn *t = s->front_state;
    if (t == NULL)
        return;
    s->front_state = NULL;
    if (t->auth_req != NULL)
        auth_client_cancel(t->auth_req);
    if (t->lookup != NULL)
        director_lookup_cancel(t->lookup);
    while (t->backends != NULL) {
        struct lmtp_proxy_backend *b = t->backends;
        t->backends = b->next;
        lmtp_proxy_backend_free(b);
    }
    lmtp_recipient_name_free(&t->name);
    free(t->user);
    free(t->tag);
    free(t->routes);
    event_free(t->defer);
    event_free(t->relookup);
    free(t);
}

static const struct lmtp_front_ops front_ops = {
    .rcpt = front_rcpt,
    .data = front_data,
    .reset = front_reset,
};

/* ---------- life cycle ---------- */

struct lmtp_proxy *lmtp_proxy_start(const struct service_env *env,
                                    const struct lmtp_proxy_config *cfg,
                                    const struct lmtp_proxy_deps *deps, struct petrel_error *err)
{
    if (deps->directors == NULL) {
        petrel_error_set(err, PETREL_ERR_INVALID, "login.lmtp: no director client");
        return NULL;
    }
    struct lmtp_proxy *p = xcalloc(1, sizeof(*p));
    p->cfg = cfg;
    p->deps = *deps;
    p->base = env->base;
    p->srv = lmtp_server_start_front(env, &cfg->front, &front_ops, p, LMTP_PROXY_COMPONENT, err);
    if (p->srv == NULL) {
        free(p);
        return NULL;
    }
    p->registry = env->metrics;
    login_metrics_register(env->metrics, "lmtp", &p->m);
    metrics_add_collector(env->metrics, sessions_collect, p);
    log_info(LMTP_PROXY_COMPONENT, "lmtp front listening",
             "address=%s backend_port=%lld backend_tls=%s retries=%d", lmtp_proxy_address(p),
             (long long)cfg->backend_port, deps->backend_tls != NULL ? "on" : "off",
             deps->transient_retries);
    return p;
}

const char *lmtp_proxy_address(const struct lmtp_proxy *p)
{
    return lmtp_server_address(p->srv);
}

void lmtp_proxy_stop_accepting(struct lmtp_proxy *p)
{
    lmtp_server_stop_accepting(p->srv);
}

size_t lmtp_proxy_sessions(const struct lmtp_proxy *p)
{
    return lmtp_server_sessions(p->srv);
}

void lmtp_proxy_free(struct lmtp_proxy *p)
{
    if (p == NULL)
        return;
    if (p->registry != NULL)
        metrics_remove_collector(p->registry, sessions_collect, p);
    lmtp_server_free(p->srv);
    free(p);
}
