/* The login proxy's shared part after the client said who it is: the hub
 * (directors, ring pushes, the proxied sessions), the password check with
 * retries, and each session's way to its backend and into the relay. */
#include "protocols/common/mail-proxy.h"

#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/bev-write.h"
#include "net/tls-conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>
#include <ctype.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define PROXY_COMPONENT "login"
/* Queued bytes per direction before the other side is no longer read:
 * a side that stops reading costs the proxy about this much. */
#define MAIL_PROXY_RELAY_HIGH_WATER (256u * 1024)
/* Bytes moved per side and loop pass: libevent's 16 KiB default makes a
 * big FETCH take many loop passes per megabyte. */
#define MAIL_PROXY_RELAY_STEP (256u * 1024)
#define MAIL_PROXY_RELAY_LINGER_MS 2000
/* The x-proxy-ttl / XCLIENT TTL a proxied login starts with (Dovecot's). */
#define MAIL_PROXY_TTL 5

/* ---------- the hub ---------- */

struct mail_proxy_hub {
    struct event_base *base;
    struct director_client *directors;
    int transient_retries;
    SSL_CTX *backend_tls;
    int64_t backend_timeout_ms;
    int64_t idle_timeout_ms;
    struct mail_proxy *sessions; /* every session being set up or relayed */
    size_t session_count;
    /* The relayed sessions by user and by backend IP (what the ring's
     * pushes name): key -> struct proxy_bucket. */
    struct smap *by[2];
    /* Users a USER-MOVED named lately: user_key -> struct proxy_move. A
     * director that has not heard of the move yet (it reaches the other
     * directors a moment later) may still answer the old backend; for
     * director_timeout after the push its backend wins. */
    struct smap *moved;
    int64_t move_window_ms;
};

/* At most this many recent moves are kept; a burst beyond it starts the
 * list afresh (moves are an operator's, rare). */
#define PROXY_MOVES_MAX 4096

struct proxy_move {
    char ip[64];
    unsigned port;
    int64_t until_ms;
};

enum { BY_USER, BY_BACKEND };

struct proxy_bucket {
    struct mail_proxy *head;
};

struct mail_proxy_front {
    struct mail_proxy_hub *hub;
    const struct mail_proxy_protocol *proto;
    unsigned backend_port;
    struct login_metrics m;
};

enum proxy_state {
    PROXY_LOOKUP,   /* asking a director */
    PROXY_BACKEND,  /* dialling or talking to the backend */
    PROXY_WAIT,     /* a retry's pause */
    PROXY_ANSWERED, /* done(OK) ran: the owner replies and calls mail_proxy_relay() */
    PROXY_RELAY,
    PROXY_OVER, /* done(not OK) ran, or the relay ended */
};

struct mail_proxy {
    struct mail_proxy_front *front;
    struct mail_proxy_callbacks cb;
    void *arg;
    struct mail_session_io *io;
    struct warden_client *warden;
    char *login_name;
    char *user;
    char *user_key; /* `user` in lower case: the ring's pushes name users in any case */
    char *password;
    char *tag;
    enum proxy_state state;
    int retries_left;
    char sid[40];
    bool sid_started; /* SESSION-START sent */
    bool counted;     /* in petrel_login_sessions */
    /* the director's answer */
    struct director_lookup *lookup;
    char backend_ip[64];
    unsigned backend_port;
    /* the backend being set up */
    struct bufferevent *backend;
    struct tls_handshake_deadline *handshake;
    void *dialogue;
    struct event *timer; /* backend_timeout, or the retry pause */
    struct event *later; /* done() from the loop */
    enum mail_proxy_outcome later_outcome;
    char *later_text; /* the backend's answer until done() (allocated: sessions stay small) */
    int64_t phase_started_us;
    struct net_relay *relay;
    struct mail_proxy *prev, *next; /* the hub's list */
    struct {
        struct mail_proxy *prev, *next;
    } by[2];      /* the buckets of hub->by[] while relaying */
    bool indexed; /* in hub->by[] */
    /* A ring push named this session while its backend login was under
     * way (why): it is not relayed as it was but set up again. */
    const char *stale;
};

/* The user index's key: user names match without regard to ASCII case,
 * as the director's hash of a name does (docs/ring-protocol.md). */
static char *lower_copy(const char *user)
{
    char *k = xstrdup(user);
    for (char *c = k; *c != '\0'; c++)
        *c = (char)tolower((unsigned char)*c);
    return k;
}

static const char *index_key(const struct mail_proxy *p, int which)
{
    return which == BY_USER ? p->user_key : p->backend_ip;
}

static void relayed_add(struct mail_proxy_hub *hub, struct mail_proxy *p)
{
    for (int w = 0; w < 2; w++) {
        struct proxy_bucket *b = smap_get(hub->by[w], index_key(p, w));
        if (b == NULL) {
            b = xcalloc(1, sizeof(*b));
            smap_put(hub->by[w], index_key(p, w), b);
        }
        p->by[w].prev = NULL;
        p->by[w].next = b->head;
        if (b->head != NULL)
            b->head->by[w].prev = p;
        b->head = p;
    }
    p->indexed = true;
}

static void relayed_remove(struct mail_proxy_hub *hub, struct mail_proxy *p)
{
    if (!p->indexed)
        return;
    for (int w = 0; w < 2; w++) {
        struct proxy_bucket *b = smap_get(hub->by[w], index_key(p, w));
        if (p->by[w].prev != NULL)
            p->by[w].prev->by[w].next = p->by[w].next;
        else if (b != NULL)
            b->head = p->by[w].next;
        if (p->by[w].next != NULL)
            p->by[w].next->by[w].prev = p->by[w].prev;
        p->by[w].prev = p->by[w].next = NULL;
        if (b != NULL && b->head == NULL)
            free(smap_remove(hub->by[w], index_key(p, w)));
    }
    p->indexed = false;
}

static void index_add(struct mail_proxy_hub *hub, struct mail_proxy *p)
{
    p->prev = NULL;
    p->next = hub->sessions;
    if (hub->sessions != NULL)
        hub->sessions->prev = p;
    hub->sessions = p;
    hub->session_count++;
}

static void index_remove(struct mail_proxy_hub *hub, struct mail_proxy *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else if (hub->sessions == p)
        hub->sessions = p->next;
    else
        return; /* not linked */
    if (p->next != NULL)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
    hub->session_count--;
}

/* Ends the relayed sessions in the bucket of `key` (a user or a backend
 * IP), but those on backend `keep_ip` (may be NULL), with a farewell.
 * Ending a relay only schedules its end (net_relay_stop), so the bucket
 * stays intact while it is walked. A session still logging in at its
 * backend is marked instead: relaying it would let it outlive the push
 * (a moved user served by two backends at once), so later_cb() sets it
 * up again. */
static size_t end_sessions(struct mail_proxy_hub *hub, int which, const char *key,
                           const char *keep_ip, const char *why)
{
    const struct proxy_bucket *b = smap_get(hub->by[which], key);
    size_t n = 0;
    for (struct mail_proxy *p = b != NULL ? b->head : NULL; p != NULL; p = p->by[which].next) {
        if (keep_ip != NULL && strcmp(p->backend_ip, keep_ip) == 0)
            continue;
        if (p->state != PROXY_RELAY) {
            log_info(PROXY_COMPONENT, "proxied login overtaken by the ring",
                     "session=%s backend=%s reason=\"%s\"", p->io->id, p->backend_ip, why);
            p->stale = why;
            n++;
            continue;
        }
        const char *farewell = strcmp(p->front->proto->name, "pop3") == 0
                                   ? "-ERR [SYS/TEMP] Disconnected: %s\r\n"
                                   : "* BYE [UNAVAILABLE] Disconnected: %s\r\n";
        char line[200];
        snprintf(line, sizeof(line), farewell, why);
        log_info(PROXY_COMPONENT, "ending proxied session", "session=%s backend=%s reason=\"%s\"",
                 p->io->id, p->backend_ip, why);
        net_relay_stop(p->relay, line, strlen(line));
        n++;
    }
    return n;
}

static void on_user_kicked(void *arg, const char *user)
{
    char *key = lower_copy(user);
    size_t n = end_sessions(arg, BY_USER, key, NULL, "kicked by the operator");
    free(key);
    char uq[300];
    log_info(PROXY_COMPONENT, "user kicked", "user=%s sessions=%zu",
             log_quote(uq, sizeof(uq), user), n);
}

static void on_user_moved(void *arg, const char *user, const char *ip, unsigned port)
{
    struct mail_proxy_hub *hub = arg;
    char *key = lower_copy(user);
    if (ip != NULL && ip[0] != '\0') {
        struct proxy_move *mv = smap_get(hub->moved, key);
        if (mv == NULL) {
            if (smap_count(hub->moved) >= PROXY_MOVES_MAX) {
                smap_free(hub->moved, free);
                hub->moved = smap_new();
            }
            mv = xcalloc(1, sizeof(*mv));
            smap_put(hub->moved, key, mv);
        }
        snprintf(mv->ip, sizeof(mv->ip), "%s", ip);
        mv->port = port;
        mv->until_ms = clock_mono_ms() + hub->move_window_ms;
    }
    size_t n = end_sessions(hub, BY_USER, key, ip, "moved to another server");
    free(key);
    char uq[300];
    log_info(PROXY_COMPONENT, "user moved", "user=%s backend=%s sessions=%zu",
             log_quote(uq, sizeof(uq), user), ip != NULL ? ip : "", n);
}

static void on_backend_change(void *arg, enum ring_change change, const struct ring_host *host)
{
    if (change == RING_CHANGE_UP || host == NULL || host->ip == NULL)
        return;
    size_t n = end_sessions(arg, BY_BACKEND, host->ip, NULL,
                            change == RING_CHANGE_DOWN ? "server going down" : "server flushed");
    log_info(PROXY_COMPONENT, "backend change", "backend=%s change=%s sessions=%zu", host->ip,
             ring_change_name(change), n);
}

struct mail_proxy_hub *mail_proxy_hub_new(struct event_base *base,
                                          const struct mail_proxy_hub_config *cfg,
                                          struct petrel_error *err)
{
    struct mail_proxy_hub *hub = xcalloc(1, sizeof(*hub));
    hub->base = base;
    hub->transient_retries = cfg->transient_retries;
    hub->backend_tls = cfg->backend_tls;
    hub->backend_timeout_ms = cfg->backend_timeout_ms;
    hub->idle_timeout_ms = cfg->idle_timeout_ms;
    hub->by[BY_USER] = smap_new();
    hub->by[BY_BACKEND] = smap_new();
    hub->moved = smap_new();
    hub->move_window_ms = cfg->director_timeout_ms;
    const struct director_client_config dcc = {
        .addresses = cfg->directors,
        .name = cfg->name,
        .secret = cfg->ring_secret,
        .timeout_ms = cfg->director_timeout_ms,
    };
    const struct director_client_events events = {
        .user_kicked = on_user_kicked,
        .user_moved = on_user_moved,
        .backend_change = on_backend_change,
    };
    hub->directors = director_client_new(base, &dcc, &events, hub, err);
    if (hub->directors == NULL) {
        mail_proxy_hub_free(hub);
        return NULL;
    }
    return hub;
}

struct director_client *mail_proxy_hub_directors(struct mail_proxy_hub *hub)
{
    return hub->directors;
}

size_t mail_proxy_hub_sessions(const struct mail_proxy_hub *hub)
{
    return hub->session_count;
}

void mail_proxy_hub_free(struct mail_proxy_hub *hub)
{
    if (hub == NULL)
        return;
    director_client_free(hub->directors);
    smap_free(hub->by[BY_USER], free);
    smap_free(hub->by[BY_BACKEND], free);
    smap_free(hub->moved, free);
    free(hub);
}

struct mail_proxy_front *mail_proxy_front_new(struct mail_proxy_hub *hub,
                                              const struct mail_proxy_protocol *proto,
                                              int64_t backend_port, struct metrics_registry *reg)
{
    struct mail_proxy_front *f = xcalloc(1, sizeof(*f));
    f->hub = hub;
    f->proto = proto;
    f->backend_port = (unsigned)backend_port;
    login_metrics_register(reg, proto->name, &f->m);
    return f;
}

void mail_proxy_front_free(struct mail_proxy_front *f)
{
    free(f);
}

const struct login_metrics *mail_proxy_front_metrics(const struct mail_proxy_front *f)
{
    return &f->m;
}

/* ---------- pure helpers ---------- */

bool mail_proxy_session_id(char prefix, const char *io_id, char *out, size_t size)
{
    int n = snprintf(out, size, "%c%s", prefix, io_id);
    return n > 0 && (size_t)n < size && ring_id_valid(out);
}

unsigned mail_proxy_peer_port(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    if (colon == NULL || colon[1] == '\0')
        return 0;
    if (peer[0] != '[' && strchr(peer, ':') != colon)
        return 0; /* a bare IPv6 address: no port */
    char *end;
    unsigned long v = strtoul(colon + 1, &end, 10);
    return *end == '\0' && v > 0 && v <= 65535 ? (unsigned)v : 0;
}

const char *mail_proxy_director_tag(const struct userdb_entry *u)
{
    for (size_t i = 0; u != NULL && i < u->extra_count; i++) {
        if (strcmp(u->extra[i].key, "director_tag") == 0)
            return u->extra[i].value;
    }
    return "";
}

/* ---------- the password check ---------- */

struct mail_proxy_auth {
    struct mail_proxy_front *front;
    struct auth_client *auth;
    struct auth_client_request *req;
    char *user;
    char *password;
    char *ip;
    mail_proxy_auth_fn *done;
    void *arg;
    int dial_left; /* retries left of the connection to the auth service */
    int auth_left; /* retries left of a temporary answer */
    bool dial_failed;
    int64_t started_us;
    struct event *timer;
};

static void auth_free(struct mail_proxy_auth *a)
{
    if (a->req != NULL)
        auth_client_cancel(a->req);
    if (a->timer != NULL)
        event_free(a->timer);
    if (a->password != NULL) {
        OPENSSL_cleanse(a->password, strlen(a->password));
        free(a->password);
    }
    free(a->user);
    free(a->ip);
    free(a);
}

static void auth_attempt(struct mail_proxy_auth *a);

/* A connection-level failure (the auth client could not reach the
 * service), not an answer of the service. */
static bool auth_dial_failure(const struct auth_client_reply *r)
{
    return r->status == AUTH_CLIENT_ERROR && r->reason != NULL &&
           strstr(r->reason, "unavailable") != NULL;
}

static void auth_answer(const struct auth_client_reply *r, void *arg)
{
    struct mail_proxy_auth *a = arg;
    const struct login_metrics *m = &a->front->m;
    a->req = NULL;
    login_metrics_phase(m, LOGIN_PHASE_AUTH, a->started_us);
    bool dial = auth_dial_failure(r);
    if (dial || a->dial_failed)
        login_metrics_phase(m, LOGIN_PHASE_AUTH_DIAL, a->started_us);
    a->dial_failed = dial;
    bool temporary =
        r->status == AUTH_CLIENT_ERROR || (r->status == AUTH_CLIENT_FAIL && r->temporary);
    if (temporary) {
        enum login_stage stage = dial ? LOGIN_STAGE_AUTH_DIAL : LOGIN_STAGE_AUTH;
        int *left = dial ? &a->dial_left : &a->auth_left;
        if (*left > 0) {
            (*left)--;
            login_metrics_retry(m, stage);
            log_debug(PROXY_COMPONENT, "auth retry", "stage=%s reason=\"%s\"",
                      login_stage_name(stage), r->reason != NULL ? r->reason : "");
            const struct timeval tv = {0, MAIL_PROXY_RETRY_MS * 1000};
            evtimer_add(a->timer, &tv);
            return;
        }
        if (a->front->hub->transient_retries >= 0)
            login_metrics_exhausted(m, stage);
        login_metrics_result(m, LOGIN_RESULT_UNAVAILABLE);
        struct auth_client_reply e = *r;
        e.status = AUTH_CLIENT_ERROR;
        a->done(a->arg, &e);
        auth_free(a);
        return;
    }
    a->done(a->arg, r);
    auth_free(a);
}

static void auth_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    auth_attempt(arg);
}

static void auth_attempt(struct mail_proxy_auth *a)
{
    a->started_us = clock_mono_us();
    a->req = auth_client_verify(a->auth, a->user, a->password, a->front->proto->name, a->ip,
                                auth_answer, a);
}

struct mail_proxy_auth *mail_proxy_auth_start(struct mail_proxy_front *f, struct auth_client *auth,
                                              const char *user, const char *password,
                                              const char *ip, mail_proxy_auth_fn *done, void *arg)
{
    struct mail_proxy_auth *a = xcalloc(1, sizeof(*a));
    a->front = f;
    a->auth = auth;
    a->user = xstrdup(user);
    a->password = xstrdup(password);
    a->ip = ip != NULL ? xstrdup(ip) : NULL;
    a->done = done;
    a->arg = arg;
    int budget = f->hub->transient_retries > 0 ? f->hub->transient_retries : 0;
    a->dial_left = budget;
    a->auth_left = budget;
    a->timer = evtimer_new(f->hub->base, auth_retry_cb, a);
    auth_attempt(a);
    return a;
}

void mail_proxy_auth_cancel(struct mail_proxy_auth *a)
{
    if (a != NULL)
        auth_free(a);
}

/* ---------- the proxied session ---------- */

static void wipe_password(struct mail_proxy *p)
{
    if (p->password == NULL)
        return;
    OPENSSL_cleanse(p->password, strlen(p->password));
    free(p->password);
    p->password = NULL;
}

/* The backend attempt's pieces; the session may try again (to another
 * backend: its index keys go with the attempt). */
static void backend_close(struct mail_proxy *p)
{
    relayed_remove(p->front->hub, p);
    tls_handshake_deadline_free(p->handshake);
    p->handshake = NULL;
    if (p->backend != NULL)
        bufferevent_free(p->backend);
    p->backend = NULL;
    if (p->dialogue != NULL)
        p->front->proto->dialogue_free(p->dialogue);
    p->dialogue = NULL;
    if (p->timer != NULL)
        evtimer_del(p->timer);
}

static void lookup_start(struct mail_proxy *p);
static void setup_failed(struct mail_proxy *p, const char *why);

static void later_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mail_proxy *p = arg;
    enum mail_proxy_outcome o = p->later_outcome;
    if (o == MAIL_PROXY_OK && p->stale != NULL) {
        /* Logged in at a backend a push took the user from: that
         * connection goes, the director is asked again. */
        char why[120];
        snprintf(why, sizeof(why), "ring push during the backend login: %s", p->stale);
        setup_failed(p, why);
        return;
    }
    wipe_password(p);
    p->state = o == MAIL_PROXY_OK ? PROXY_ANSWERED : PROXY_OVER;
    if (o != MAIL_PROXY_OK) {
        /* The session stays pre-login: it is not proxied any more. */
        index_remove(p->front->hub, p);
        if (p->io->username != NULL) {
            mail_session_io_logout(p->io);
            mail_session_io_login_cancel(p->io);
        }
    }
    /* The owner may free the proxy in done(): the text is handed over. */
    char *text = p->later_text;
    p->later_text = NULL;
    p->cb.done(p->arg, o, text != NULL ? text : "");
    free(text);
}

/* done() from the loop, so that no caller up the stack sees the owner go. */
static void finish(struct mail_proxy *p, enum mail_proxy_outcome o, const char *text)
{
    /* `text` may point into the dialogue, which goes with the backend. */
    free(p->later_text);
    p->later_text = xstrdup(text != NULL ? text : "");
    backend_close(p);
    if (o != MAIL_PROXY_OK)
        wipe_password(p);
    p->later_outcome = o;
    event_active(p->later, EV_TIMEOUT, 1);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mail_proxy *p = arg;
    if (p->state == PROXY_WAIT)
        lookup_start(p);
    else if (p->state == PROXY_BACKEND) {
        /* backend_timeout passed during the dial or the dialogue */
        char why[64];
        snprintf(why, sizeof(why), "no login within %lld ms",
                 (long long)p->front->hub->backend_timeout_ms);
        setup_failed(p, why);
    }
}

/* A temporary failure of the backend set-up: again after a pause while
 * the budget lasts, else the client hears of it. */
static void setup_failed(struct mail_proxy *p, const char *why)
{
    const struct login_metrics *m = &p->front->m;
    backend_close(p);
    char uq[300];
    if (p->retries_left > 0) {
        p->retries_left--;
        login_metrics_retry(m, LOGIN_STAGE_BACKEND_SESSION);
        log_info(PROXY_COMPONENT, "backend set-up failed, retrying",
                 "session=%s user=%s backend=%s reason=\"%s\"", p->io->id,
                 log_quote(uq, sizeof(uq), p->user), p->backend_ip, why);
        p->state = PROXY_WAIT;
        const struct timeval tv = {0, MAIL_PROXY_RETRY_MS * 1000};
        evtimer_add(p->timer, &tv);
        return;
    }
    if (p->front->hub->transient_retries >= 0)
        login_metrics_exhausted(m, LOGIN_STAGE_BACKEND_SESSION);
    login_metrics_result(m, LOGIN_RESULT_UNAVAILABLE);
    log_warn(PROXY_COMPONENT, "proxied login unavailable",
             "session=%s user=%s backend=%s reason=\"%s\"", p->io->id,
             log_quote(uq, sizeof(uq), p->user), p->backend_ip, why);
    finish(p, MAIL_PROXY_UNAVAILABLE, why);
}

/* The login's one write to a plain backend goes straight to the socket
 * when nothing is queued (net/bev-write.h): a fresh connection takes a few
 * hundred bytes at once. */
static void backend_write(struct mail_proxy *p, const char *data, size_t len)
{
    net_bev_write(p->backend, data, len);
}

static void backend_line(struct mail_proxy *p, const char *line, size_t len)
{
    struct buf out = {0};
    struct mail_proxy_login_result r = {.step = MAIL_PROXY_LOGIN_CONTINUE};
    p->front->proto->dialogue_line(p->dialogue, line, len, &out, &r);
    if (out.len > 0)
        backend_write(p, out.data, out.len);
    OPENSSL_cleanse(out.data, out.len); /* AUTH PLAIN carries the password */
    buf_free(&out);
    if (r.step == MAIL_PROXY_LOGIN_CONTINUE)
        return;
    const struct login_metrics *m = &p->front->m;
    login_metrics_phase(m, LOGIN_PHASE_BACKEND_PREAMBLE, p->phase_started_us);
    char uq[300];
    switch (r.step) {
    case MAIL_PROXY_LOGIN_OK: {
        /* The relay takes the backend's bufferevent as it is. */
        free(p->later_text);
        p->later_text = xstrdup(r.text != NULL ? r.text : "");
        evtimer_del(p->timer);
        p->front->proto->dialogue_free(p->dialogue);
        p->dialogue = NULL;
        tls_handshake_deadline_free(p->handshake);
        p->handshake = NULL;
        /* The password is wiped in later_cb(): a ring push before it runs
         * makes the session log in again. */
        p->later_outcome = MAIL_PROXY_OK;
        /* Until the relay takes over, what the backend sends waits in the
         * input and its end is the relay's to see: no callbacks, but
         * reading stays on (disabling it now and enabling it for the relay
         * a moment later would cost two epoll_ctl calls per login). */
        bufferevent_setcb(p->backend, NULL, NULL, NULL, NULL);
        event_active(p->later, EV_TIMEOUT, 1);
        return;
    }
    case MAIL_PROXY_LOGIN_REJECTED:
        login_metrics_result(m, LOGIN_RESULT_BACKEND_REJECTED);
        log_info(PROXY_COMPONENT, "backend rejected the login", "session=%s user=%s backend=%s",
                 p->io->id, log_quote(uq, sizeof(uq), p->user), p->backend_ip);
        finish(p, MAIL_PROXY_REJECTED, r.text);
        return;
    default: {
        char why[200];
        snprintf(why, sizeof(why), "backend dialogue: %s: %.150s",
                 mail_proxy_login_step_name(r.step), r.text != NULL ? r.text : "");
        setup_failed(p, why);
        return;
    }
    }
}

static void backend_read_cb(struct bufferevent *bev, void *arg)
{
    struct mail_proxy *p = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (p->dialogue != NULL && p->backend == bev) {
        size_t n = 0;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
        if (line == NULL) {
            if (evbuffer_get_length(in) > MAIL_PROXY_LOGIN_LINE_MAX + 2)
                setup_failed(p, "backend line too long");
            return;
        }
        backend_line(p, line, n);
        free(line);
        /* Logged in (or given up): the dialogue is gone, and what the
         * backend sent after its answer is the relay's. */
    }
}

static void backend_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct mail_proxy *p = arg;
    if (what & BEV_EVENT_CONNECTED) {
        login_metrics_phase(&p->front->m, LOGIN_PHASE_BACKEND_DIAL, p->phase_started_us);
        p->phase_started_us = clock_mono_us();
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[200], tls[120] = "";
        if (p->front->hub->backend_tls != NULL)
            tls_conn_error(p->backend, tls, sizeof(tls));
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(why, sizeof(why), "backend %s: %s",
                 (what & BEV_EVENT_EOF) ? "closed the connection" : "connection failed",
                 tls[0] != '\0'                         ? tls
                 : ((what & BEV_EVENT_ERROR) && e != 0) ? evutil_socket_error_to_string(e)
                                                        : "");
        setup_failed(p, why);
    }
}

static void handshake_expired(void *arg)
{
    struct mail_proxy *p = arg;
    p->handshake = NULL; /* freed by its caller */
    setup_failed(p, "backend TLS handshake timed out");
}

static void backend_dial(struct mail_proxy *p)
{
    struct mail_proxy_hub *hub = p->front->hub;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char addr[96];
    unsigned port = p->front->backend_port != 0 ? p->front->backend_port : p->backend_port;
    snprintf(addr, sizeof(addr), strchr(p->backend_ip, ':') != NULL ? "[%s]:%u" : "%s:%u",
             p->backend_ip, port);
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) != 0) {
        setup_failed(p, "the director named no usable backend address");
        return;
    }
    p->state = PROXY_BACKEND;
    p->phase_started_us = clock_mono_us();
    /* Indexed from here on, so that a push during the login finds it. */
    relayed_add(hub, p);
    if (hub->backend_tls != NULL) {
        p->backend = tls_conn_connect(hub->base, -1, hub->backend_tls, p->backend_ip);
        if (p->backend != NULL)
            p->handshake = tls_handshake_deadline_new(p->backend, hub->backend_timeout_ms,
                                                      handshake_expired, p);
    } else {
        p->backend = bufferevent_socket_new(hub->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (p->backend == NULL) {
        setup_failed(p, "cannot create a backend connection");
        return;
    }
    struct mail_proxy_login_params params = {.user = p->login_name, .password = p->password};
    mail_forward_init(&params.client);
    snprintf(params.client.ip, sizeof(params.client.ip), "%s", p->io->peer_ip);
    params.client.port = mail_proxy_peer_port(p->io->peer);
    snprintf(params.client.session, sizeof(params.client.session), "%s", p->io->id);
    params.client.ttl = p->io->forwarded_ttl >= 0 ? p->io->forwarded_ttl - 1 : MAIL_PROXY_TTL;
    p->dialogue = p->front->proto->dialogue_new(&params);
    bufferevent_setcb(p->backend, backend_read_cb, NULL, backend_event_cb, p);
    bufferevent_setwatermark(p->backend, EV_READ, 0, MAIL_PROXY_LOGIN_LINE_MAX * 2);
    bufferevent_enable(p->backend, EV_READ | EV_WRITE);
    const struct timeval tv = {(time_t)(hub->backend_timeout_ms / 1000),
                               (suseconds_t)(hub->backend_timeout_ms % 1000) * 1000};
    evtimer_add(p->timer, &tv);
    if (bufferevent_socket_connect(p->backend, (struct sockaddr *)&ss, sslen) != 0) {
        setup_failed(p, "cannot connect to the backend");
        return;
    }
    /* A relayed command must leave at once, not wait behind Nagle for the
     * ACK of the one before (the listeners set the same on the client's
     * side). */
    int one = 1;
    setsockopt(bufferevent_getfd(p->backend), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* A director's answer from before a move it had not heard of yet gives way
 * to the move's backend (struct mail_proxy_hub.moved). */
static void apply_recent_move(struct mail_proxy *p)
{
    struct mail_proxy_hub *hub = p->front->hub;
    struct proxy_move *mv = smap_get(hub->moved, p->user_key);
    if (mv == NULL)
        return;
    if (clock_mono_ms() >= mv->until_ms) {
        free(smap_remove(hub->moved, p->user_key));
        return;
    }
    if (strcmp(mv->ip, p->backend_ip) == 0)
        return;
    log_info(PROXY_COMPONENT, "routed by a recent move", "session=%s director=%s backend=%s",
             p->io->id, p->backend_ip, mv->ip);
    snprintf(p->backend_ip, sizeof(p->backend_ip), "%s", mv->ip);
    p->backend_port = mv->port;
}

static void lookup_done(void *arg, const struct director_lookup_result *r)
{
    struct mail_proxy *p = arg;
    p->lookup = NULL;
    login_metrics_phase(&p->front->m, LOGIN_PHASE_DIRECTOR_LOOKUP, p->phase_started_us);
    if (!r->ok) {
        char why[200];
        snprintf(why, sizeof(why), "director: %s%s%.150s", ring_outcome_name(r->outcome),
                 r->error != NULL ? ": " : "", r->error != NULL ? r->error : "");
        setup_failed(p, why);
        return;
    }
    snprintf(p->backend_ip, sizeof(p->backend_ip), "%s", r->ip);
    p->backend_port = r->port;
    apply_recent_move(p);
    if (log_enabled(LOG_DEBUG, PROXY_COMPONENT)) { /* no quoting per login for a line not logged */
        char uq[300];
        log_debug(PROXY_COMPONENT, "routed", "session=%s user=%s backend=%s:%u outcome=%s",
                  p->io->id, log_quote(uq, sizeof(uq), p->user), r->ip, r->port,
                  ring_outcome_name(r->outcome));
    }
    /* Counted and registered once, on the first answer: the warden lists
     * the session from here, with the client's real address. */
    if (p->io->username == NULL) {
        if (mail_session_io_admit(p->io, p->user) != MAIL_SESSION_LOGIN_OK) {
            finish(p, MAIL_PROXY_TOO_MANY, "too many sessions");
            return;
        }
        int64_t t = clock_mono_us();
        mail_session_io_register(p->io, p->warden, p->front->proto->name);
        login_metrics_phase(&p->front->m, LOGIN_PHASE_WARDEN_CONNECT, t);
    }
    backend_dial(p);
}

static void lookup_start(struct mail_proxy *p)
{
    /* A client forwarded by another proxy with its hops used up: proxies
     * pointing at each other (Dovecot's "Proxying loops"). */
    if (p->io->forwarded_ttl >= 0 && p->io->forwarded_ttl <= 1) {
        log_warn(PROXY_COMPONENT, "proxy loop: no hops left", "session=%s", p->io->id);
        login_metrics_result(&p->front->m, LOGIN_RESULT_UNAVAILABLE);
        finish(p, MAIL_PROXY_UNAVAILABLE, "proxy loop");
        return;
    }
    p->state = PROXY_LOOKUP;
    p->stale = NULL;
    p->phase_started_us = clock_mono_us();
    p->lookup = director_client_lookup(p->front->hub->directors, p->user, p->tag, lookup_done, p);
}

struct mail_proxy *mail_proxy_start(struct mail_proxy_front *f,
                                    const struct mail_proxy_request *req,
                                    const struct mail_proxy_callbacks *cb, void *arg)
{
    struct mail_proxy *p = xcalloc(1, sizeof(*p));
    p->front = f;
    p->cb = *cb;
    p->arg = arg;
    p->io = req->io;
    p->warden = req->warden;
    p->login_name = xstrdup(req->login_name);
    p->user = xstrdup(req->user);
    p->user_key = lower_copy(req->user);
    p->password = xstrdup(req->password);
    p->tag = xstrdup(req->tag != NULL ? req->tag : "");
    p->retries_left = f->hub->transient_retries > 0 ? f->hub->transient_retries : 0;
    p->timer = evtimer_new(f->hub->base, retry_cb, p);
    p->later = event_new(f->hub->base, -1, 0, later_cb, p);
    index_add(f->hub, p);
    lookup_start(p);
    return p;
}

static void relay_done(void *arg, enum net_relay_end end, const struct net_relay_stats *stats)
{
    struct mail_proxy *p = arg;
    p->relay = NULL;
    p->state = PROXY_OVER;
    relayed_remove(p->front->hub, p);
    index_remove(p->front->hub, p);
    if (p->sid_started)
        director_client_session_end(p->front->hub->directors, p->sid);
    p->sid_started = false;
    if (p->counted)
        login_metrics_sessions_add(&p->front->m, -1);
    p->counted = false;
    log_info(PROXY_COMPONENT, "proxied session ended",
             "session=%s backend=%s end=%s to_backend=%llu to_client=%llu", p->io->id,
             p->backend_ip, net_relay_end_name(end), (unsigned long long)stats->to_backend,
             (unsigned long long)stats->to_client);
    p->cb.ended(p->arg, stats);
}

void mail_proxy_relay(struct mail_proxy *p)
{
    if (p->state != PROXY_ANSWERED)
        return;
    struct mail_proxy_hub *hub = p->front->hub;
    const struct login_metrics *m = &p->front->m;
    login_metrics_result(m, LOGIN_RESULT_OK);
    login_metrics_sessions_add(m, 1);
    p->counted = true;
    if (mail_proxy_session_id(p->front->proto->sid_prefix, p->io->id, p->sid, sizeof(p->sid)))
        p->sid_started = director_client_session_start(
            hub->directors, p->sid, p->user, p->backend_ip,
            p->io->tls ? p->front->proto->tls : p->front->proto->plain);
    const struct net_relay_config rc = {
        .high_water = MAIL_PROXY_RELAY_HIGH_WATER,
        .idle_ms = hub->idle_timeout_ms,
        .linger_ms = MAIL_PROXY_RELAY_LINGER_MS,
    };
    struct bufferevent *backend = p->backend;
    p->backend = NULL;
    p->state = PROXY_RELAY;
    if (!p->indexed)
        relayed_add(hub, p);
    bufferevent_set_max_single_read(backend, MAIL_PROXY_RELAY_STEP);
    bufferevent_set_max_single_write(backend, MAIL_PROXY_RELAY_STEP);
    bufferevent_set_max_single_read(p->io->bev, MAIL_PROXY_RELAY_STEP);
    bufferevent_set_max_single_write(p->io->bev, MAIL_PROXY_RELAY_STEP);
    /* The set-up's timer and done() event serve no relayed session: an
     * idle one does not keep them (later_cb, running now, touches no
     * field of `p` after done()). */
    event_free(p->timer);
    p->timer = NULL;
    event_free(p->later);
    p->later = NULL;
    p->relay = mail_session_io_relay(p->io, backend, &rc, relay_done, p);
}

bool mail_proxy_relaying(const struct mail_proxy *p)
{
    return p != NULL && p->state == PROXY_RELAY;
}

void mail_proxy_stop(struct mail_proxy *p, const char *farewell)
{
    if (p == NULL || p->state != PROXY_RELAY || p->relay == NULL)
        return;
    net_relay_stop(p->relay, farewell, farewell != NULL ? strlen(farewell) : 0);
}

void mail_proxy_free(struct mail_proxy *p)
{
    if (p == NULL)
        return;
    if (p->state == PROXY_RELAY && p->relay != NULL) {
        /* The owner goes first: the server frees every session once its
         * loop has stopped, so a relay still lingering (past
         * shutdown_timeout) would never reach its end: closed now. */
        net_relay_abort(p->relay);
        p->relay = NULL;
        p->state = PROXY_OVER;
    }
    if (p->lookup != NULL)
        director_lookup_cancel(p->lookup);
    backend_close(p);
    relayed_remove(p->front->hub, p);
    index_remove(p->front->hub, p);
    if (p->sid_started)
        director_client_session_end(p->front->hub->directors, p->sid);
    if (p->counted)
        login_metrics_sessions_add(&p->front->m, -1);
    if (p->timer != NULL)
        event_free(p->timer);
    if (p->later != NULL)
        event_free(p->later);
    wipe_password(p);
    free(p->later_text);
    free(p->login_name);
    free(p->user);
    free(p->user_key);
    free(p->tag);
    free(p);
}
