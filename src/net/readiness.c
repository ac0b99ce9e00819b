#include "net/readiness.h"

#include "core/clock.h"
#include "core/xalloc.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum check_kind { CHECK_TCP, CHECK_PROBE };

struct check {
    char *name;
    enum check_kind kind;
    char *addr;
    bool tls;
    readiness_probe_fn fn;
    void *ctx;
};

struct readiness {
    struct event_base *base;
    struct metric_family *gauge;
    SSL_CTX *tls_client; /* no verification: we only prove the port completes a handshake */
    SSL_CTX *tls_client_cert;
    struct check *checks;
    size_t count;
    size_t cap;
    struct run *active; /* runs not finished yet (finished early by readiness_free) */
};

struct run;

struct readiness_probe {
    struct run *run;
    size_t index;
    bool answered;
    struct bufferevent *bev;
};

struct run {
    struct readiness *r;
    size_t count;
    size_t pending;
    size_t refs; /* the run itself + probes still out */
    bool finished;
    struct run *next_active;
    struct readiness_probe *probes;
    struct readiness_result *results;
    char **errors;
    struct event *deadline;
    readiness_done_fn done;
    void *done_ctx;
};

static void run_finish(struct run *run);

struct readiness *readiness_new(struct event_base *base, struct metrics_registry *metrics)
{
    struct readiness *r = xcalloc(1, sizeof(*r));
    r->base = base;
    if (metrics != NULL) {
        static const char *const labels[] = {"check", NULL};
        r->gauge = metrics_gauge(metrics, "petrel_readiness_check",
                                 "Result of the latest readiness check run: 1 passing, 0 failing.",
                                 labels);
    }
    return r;
}

void readiness_free(struct readiness *r)
{
    if (r == NULL)
        return;
    while (r->active != NULL)
        run_finish(r->active); /* unlinks it; unanswered checks fail */
    for (size_t i = 0; i < r->count; i++) {
        free(r->checks[i].name);
        free(r->checks[i].addr);
    }
    free(r->checks);
    if (r->tls_client != NULL)
        SSL_CTX_free(r->tls_client);
    if (r->tls_client_cert != NULL)
        SSL_CTX_free(r->tls_client_cert);
    free(r);
}

static struct check *add_check(struct readiness *r, const char *name)
{
    r->checks = xgrow(r->checks, &r->cap, r->count + 1, sizeof(*r->checks));
    struct check *c = &r->checks[r->count++];
    memset(c, 0, sizeof(*c));
    c->name = xstrdup(name);
    if (r->gauge != NULL) {
        const char *values[] = {name};
        metric_set(metric_series_get(r->gauge, values), 0);
    }
    return c;
}

static SSL_CTX *client_ctx(const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        petrel_fatal("SSL_CTX_new failed");
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    if (cert != NULL && *cert != '\0') {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
            ERR_clear_error(); /* the check will then fail visibly on an mTLS port */
    }
    return ctx;
}

void readiness_add_tcp(struct readiness *r, const char *name, const char *addr, bool tls,
                       const char *client_cert, const char *client_key)
{
    struct check *c = add_check(r, name);
    c->kind = CHECK_TCP;
    c->addr = xstrdup(addr);
    c->tls = tls;
    if (tls && client_cert != NULL && *client_cert != '\0') {
        if (r->tls_client_cert == NULL)
            r->tls_client_cert = client_ctx(client_cert, client_key);
        c->ctx = r->tls_client_cert;
    } else if (tls) {
        if (r->tls_client == NULL)
            r->tls_client = client_ctx(NULL, NULL);
        c->ctx = r->tls_client;
    }
}

void readiness_add_probe(struct readiness *r, const char *name, readiness_probe_fn fn, void *ctx)
{
    struct check *c = add_check(r, name);
    c->kind = CHECK_PROBE;
    c->fn = fn;
    c->ctx = ctx;
}

size_t readiness_count(const struct readiness *r)
{
    return r->count;
}

static void run_release(struct run *run)
{
    if (--run->refs > 0)
        return;
    for (size_t i = 0; i < run->count; i++)
        free(run->errors[i]);
    free(run->errors);
    free(run->results);
    free(run->probes);
    if (run->deadline != NULL)
        event_free(run->deadline);
    free(run);
}

/* Called once per run; gives up the owner's reference. */
static void run_finish(struct run *run)
{
    if (run->finished)
        return;
    run->finished = true;
    for (struct run **p = &run->r->active; *p != NULL; p = &(*p)->next_active) {
        if (*p == run) {
            *p = run->next_active;
            break;
        }
    }
    if (run->deadline != NULL)
        evtimer_del(run->deadline);
    bool ready = true;
    for (size_t i = 0; i < run->count; i++) {
        struct readiness_probe *p = &run->probes[i];
        if (!p->answered) {
            run->results[i].ok = false;
            run->results[i].error = "deadline exceeded";
            if (p->bev != NULL) {
                /* A TCP probe is cancelled outright; it will not call back. */
                bufferevent_free(p->bev);
                p->bev = NULL;
                p->answered = true;
                run->refs--;
            }
        }
        if (!run->results[i].ok)
            ready = false;
        if (run->r->gauge != NULL) {
            const char *values[] = {run->results[i].name};
            metric_set(metric_series_get(run->r->gauge, values), run->results[i].ok ? 1 : 0);
        }
    }
    run->done(run->results, run->count, ready, run->done_ctx);
    run_release(run);
}

void readiness_probe_done(struct readiness_probe *probe, bool ok, const char *error)
{
    if (probe->answered)
        return;
    probe->answered = true;
    struct run *run = probe->run;
    if (!run->finished) {
        run->results[probe->index].ok = ok;
        if (!ok) {
            run->errors[probe->index] = xstrdup(error != NULL ? error : "check failed");
            run->results[probe->index].error = run->errors[probe->index];
        }
        if (--run->pending == 0)
            run_finish(run);
    }
    run_release(run);
}

static void tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct readiness_probe *probe = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        bufferevent_free(probe->bev);
        probe->bev = NULL;
        readiness_probe_done(probe, true, NULL);
        return;
    }
    char msg[256];
    int e = EVUTIL_SOCKET_ERROR();
    unsigned long ssl_err = bufferevent_get_openssl_error(probe->bev);
    if (ssl_err != 0) {
        char reason[200];
        ERR_error_string_n(ssl_err, reason, sizeof(reason));
        snprintf(msg, sizeof(msg), "TLS handshake failed: %s", reason);
    } else if (e != 0) {
        snprintf(msg, sizeof(msg), "connect failed: %s", evutil_socket_error_to_string(e));
    } else {
        snprintf(msg, sizeof(msg), "connection closed");
    }
    bufferevent_free(probe->bev);
    probe->bev = NULL;
    readiness_probe_done(probe, false, msg);
}

static void start_tcp(struct run *run, struct readiness_probe *probe, const struct check *c)
{
    struct net_addr addr;
    if (!net_addr_parse_numeric(c->addr, &addr, NULL)) {
        readiness_probe_done(probe, false, "invalid address");
        return;
    }
    struct bufferevent *bev;
    if (c->tls) {
        SSL *ssl = SSL_new((SSL_CTX *)c->ctx);
        bev = bufferevent_openssl_socket_new(run->r->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    } else {
        bev = bufferevent_socket_new(run->r->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    }
    if (bev == NULL) {
        readiness_probe_done(probe, false, "cannot create socket");
        return;
    }
    probe->bev = bev;
    bufferevent_setcb(bev, NULL, NULL, tcp_event_cb, probe);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&addr.ss, (int)addr.len) < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "connect failed: %s", strerror(errno));
        bufferevent_free(bev);
        probe->bev = NULL;
        readiness_probe_done(probe, false, msg);
    }
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_finish(arg);
}

void readiness_run(struct readiness *r, int64_t deadline_ms, readiness_done_fn done, void *ctx)
{
    struct run *run = xcalloc(1, sizeof(*run));
    run->r = r;
    run->count = r->count;
    run->pending = r->count;
    run->done = done;
    run->done_ctx = ctx;
    run->probes = xcalloc(r->count + 1, sizeof(*run->probes));
    run->results = xcalloc(r->count + 1, sizeof(*run->results));
    run->errors = xcalloc(r->count + 1, sizeof(char *));
    run->refs = 1 + r->count; /* the owner (until finish) + one per probe */
    if (r->count == 0) {
        run_finish(run);
        return;
    }
    run->next_active = r->active;
    r->active = run;
    run->deadline = evtimer_new(r->base, deadline_cb, run);
    struct timeval tv = clock_ms_to_timeval(deadline_ms);
    evtimer_add(run->deadline, &tv);
    for (size_t i = 0; i < r->count; i++) {
        run->probes[i].run = run;
        run->probes[i].index = i;
        run->results[i].name = r->checks[i].name;
    }
    run->refs++; /* probes may all answer synchronously: keep the run alive */
    for (size_t i = 0; i < r->count && !run->finished; i++) {
        const struct check *c = &r->checks[i];
        if (c->kind == CHECK_TCP)
            start_tcp(run, &run->probes[i], c);
        else
            c->fn(&run->probes[i], c->ctx);
    }
    run_release(run);
}
