/* A login proxy's client of the directors' ring port (see director-client.h). */
#include "clients/ring/director-client.h"

#include "clients/ring/ring-auth.h"
#include "core/buf.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/line-client.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "director-client"
#define MAX_DIRECTORS 16
#define NO_PRIMARY SIZE_MAX
/* How often the primary's health is looked at: a primary that went down
 * has its sessions announced elsewhere within this time. */
#define PRIMARY_CHECK_MS 500

struct link {
    struct director_client *dc;
    struct line_client *lc;
    size_t index;
    bool got_version;
    bool awaiting_auth_ok;
    char nonce[RING_AUTH_HEX_LEN + 1];
    char director_nonce[RING_AUTH_HEX_LEN + 1];
};

/* One LOOKUP sent on one connection; a lookup makes another when the first
 * connection fails before answering. */
struct attempt {
    struct line_request base; /* first: line-client's part */
    struct director_lookup *lookup;
    struct link *link;
};

struct director_lookup {
    struct director_client *dc;
    struct director_lookup *prev;
    struct director_lookup *next;
    char *user;
    char *tag;
    director_lookup_fn *done;
    void *arg;
    struct event *deadline;
    struct attempt *attempt; /* NULL while waiting for a director */
};

struct session {
    char *user;
    char *ip;
    enum ring_session_protocol protocol;
};

struct director_client {
    struct event_base *base;
    struct link links[MAX_DIRECTORS];
    size_t link_count;
    size_t links_alive; /* not yet released by their line-client */
    char *name;
    char *secret;
    int64_t timeout_ms;
    struct director_client_events ev;
    void *ev_arg;
    struct director_lookup *lookups; /* every lookup not yet answered */
    struct smap *sessions;           /* sid -> struct session */
    size_t primary;                  /* the link sessions are announced on */
    struct event *primary_check;
    bool freeing;
};

static void send_msg(struct link *l, const struct ring_msg *m)
{
    struct buf out = {0};
    ring_msg_write(&out, m);
    line_client_write(l->lc, (const char *)out.data, out.len);
    buf_free(&out);
}

/* ---------- sessions ---------- */

static void announce_session(struct link *l, const char *sid, const struct session *s)
{
    struct ring_msg m = {.type = RING_MSG_SESSION_START};
    m.session_start.sid = sid;
    m.session_start.user = s->user;
    m.session_start.ip = s->ip;
    m.session_start.protocol = s->protocol;
    send_msg(l, &m);
}

static void announce_all(struct link *l)
{
    const char *sid = "";
    bool strict = false;
    const struct session *s;
    while ((s = smap_seek(l->dc->sessions, sid, strict, &sid)) != NULL) {
        announce_session(l, sid, s);
        strict = true;
    }
}

static struct link *primary_link(struct director_client *dc)
{
    if (dc->primary == NO_PRIMARY)
        return NULL;
    struct link *l = &dc->links[dc->primary];
    return line_client_is_up(l->lc) ? l : NULL;
}

/* The primary went down: its director forgot the sessions with the
 * connection, so they are announced on the next live director. */
static void check_primary(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct director_client *dc = arg;
    if (dc->primary == NO_PRIMARY || primary_link(dc) != NULL)
        return;
    dc->primary = NO_PRIMARY;
    for (size_t i = 0; i < dc->link_count; i++) {
        if (line_client_is_up(dc->links[i].lc)) {
            dc->primary = i;
            announce_all(&dc->links[i]);
            return;
        }
    }
}

bool director_client_session_start(struct director_client *dc, const char *sid, const char *user,
                                   const char *backend_ip, enum ring_session_protocol protocol)
{
    if (!ring_id_valid(sid) || !ring_ip_valid(backend_ip) || user == NULL || user[0] == '\0' ||
        strlen(user) > RING_NAME_MAX || smap_get(dc->sessions, sid) != NULL)
        return false;
    struct session *s = xcalloc(1, sizeof(*s));
    s->user = xstrdup(user);
    s->ip = xstrdup(backend_ip);
    s->protocol = protocol;
    smap_put(dc->sessions, sid, s);
    struct link *l = primary_link(dc);
    if (l != NULL)
        announce_session(l, sid, s);
    return true;
}

static void session_free(void *value)
{
    struct session *s = value;
    free(s->user);
    free(s->ip);
    free(s);
}

void director_client_session_end(struct director_client *dc, const char *sid)
{
    struct session *s = smap_remove(dc->sessions, sid);
    if (s == NULL)
        return;
    session_free(s);
    struct link *l = primary_link(dc);
    if (l != NULL) {
        struct ring_msg m = {.type = RING_MSG_SESSION_END};
        m.session_end.sid = sid;
        send_msg(l, &m);
    }
}

size_t director_client_sessions(const struct director_client *dc)
{
    return smap_count(dc->sessions);
}

/* ---------- lookups ---------- */

static void attempt_free(struct attempt *a)
{
    if (a == NULL)
        return;
    line_request_cleanup(&a->base);
    free(a);
}

static void lookup_free(struct director_lookup *lk)
{
    DLIST_UNLINK(lk->dc->lookups, lk);
    event_free(lk->deadline);
    free(lk->user);
    free(lk->tag);
    free(lk);
}

static void lookup_answer(struct director_lookup *lk, const struct director_lookup_result *r)
{
    director_lookup_fn *done = lk->done;
    void *arg = lk->arg;
    lookup_free(lk);
    done(arg, r);
}

static void lookup_fail(struct director_lookup *lk, const char *error)
{
    struct director_lookup_result r = {.ok = false, .error = error};
    lookup_answer(lk, &r);
}

/* Sends `lk` to the first director whose handshake is done; without one
 * it waits (the next director to finish its handshake sends it). */
static void dispatch(struct director_lookup *lk)
{
    struct director_client *dc = lk->dc;
    for (size_t i = 0; i < dc->link_count; i++) {
        struct link *l = &dc->links[i];
        if (!line_client_is_up(l->lc))
            continue;
        struct attempt *a = xcalloc(1, sizeof(*a));
        a->lookup = lk;
        a->link = l;
        line_request_init(l->lc, &a->base);
        lk->attempt = a;
        char id[24];
        snprintf(id, sizeof(id), "%" PRIu64, a->base.id);
        struct ring_msg m = {.type = RING_MSG_LOOKUP};
        m.lookup.id = id;
        m.lookup.user = lk->user;
        m.lookup.tag = lk->tag;
        struct buf out = {0};
        ring_msg_write(&out, &m);
        line_client_submit(l->lc, &a->base, (const char *)out.data, out.len);
        buf_free(&out);
        return;
    }
}

static void lookup_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct director_lookup *lk = arg;
    struct attempt *a = lk->attempt;
    lk->attempt = NULL;
    if (a != NULL && line_client_cancel(a->link->lc, &a->base))
        attempt_free(a);
    char why[96];
    snprintf(why, sizeof(why), "no director answered within %" PRId64 " ms", lk->dc->timeout_ms);
    lookup_fail(lk, why);
}

struct director_lookup *director_client_lookup(struct director_client *dc, const char *user,
                                               const char *tag, director_lookup_fn *done, void *arg)
{
    struct director_lookup *lk = xcalloc(1, sizeof(*lk));
    lk->dc = dc;
    lk->user = xstrdup(user != NULL ? user : "");
    lk->tag = xstrdup(tag != NULL ? tag : "");
    lk->done = done;
    lk->arg = arg;
    lk->deadline = evtimer_new(dc->base, lookup_deadline, lk);
    struct timeval tv = {.tv_sec = dc->timeout_ms / 1000,
                         .tv_usec = (suseconds_t)(dc->timeout_ms % 1000) * 1000};
    evtimer_add(lk->deadline, &tv);
    DLIST_PUSH_AT(dc->lookups, lk, prev, next);
    dispatch(lk);
    return lk;
}

void director_lookup_cancel(struct director_lookup *lk)
{
    if (lk == NULL)
        return;
    struct attempt *a = lk->attempt;
    lk->attempt = NULL;
    if (a != NULL && line_client_cancel(a->link->lc, &a->base))
        attempt_free(a);
    lookup_free(lk);
}

/* A LOOKUP-OK or LOOKUP-FAIL: the attempt with that id, if still wanted. */
static void lookup_reply(struct link *l, const char *id, const struct director_lookup_result *r)
{
    char *end;
    uint64_t n = strtoull(id, &end, 10);
    struct line_request *req = *end == '\0' ? line_client_find(l->lc, n) : NULL;
    if (req == NULL)
        return; /* cancelled or timed out meanwhile */
    line_client_detach(l->lc, req);
    struct attempt *a = (struct attempt *)req;
    struct director_lookup *lk = a->lookup;
    lk->attempt = NULL;
    attempt_free(a);
    lookup_answer(lk, r);
}

/* ---------- one director connection ---------- */

static bool link_line(void *owner, char *line, size_t len);

/* The connection failed with the attempt out: the lookup goes to the next
 * live director (or waits for one) until its own deadline. */
static bool attempt_failed(void *owner, struct line_request *req, const char *reason)
{
    struct link *l = owner;
    struct attempt *a = (struct attempt *)req;
    struct director_lookup *lk = a->lookup;
    bool current = lk != NULL && lk->attempt == a;
    attempt_free(a);
    line_client_hold(l->lc);
    if (current) {
        lk->attempt = NULL;
        if (l->dc->freeing) {
            lookup_fail(lk, "director client closed");
        } else {
            char q[200];
            log_debug(COMPONENT, "lookup retried", "user=%s reason=%s",
                      log_quote(q, sizeof(q), lk->user), reason);
            dispatch(lk);
        }
    }
    return line_client_drop(l->lc);
}

static void link_opened(void *owner)
{
    struct link *l = owner;
    l->got_version = false;
    l->awaiting_auth_ok = false;
    struct buf out = {0};
    ring_write_version(&out);
    line_client_write(l->lc, (const char *)out.data, out.len);
    buf_free(&out);
}

static void link_released(void *owner)
{
    struct link *l = owner;
    struct director_client *dc = l->dc;
    if (--dc->links_alive == 0) {
        smap_free(dc->sessions, session_free);
        free(dc->name);
        ring_secret_free(dc->secret);
        free(dc);
    }
}

static const struct line_client_ops link_ops = {
    .line = link_line,
    .fail = attempt_failed,
    .opened = link_opened,
    .release = link_released,
};

static void send_hello(struct link *l)
{
    struct buf out = {0};
    ring_write_hello(&out, RING_KIND_LOGIN, l->dc->name);
    line_client_write(l->lc, (const char *)out.data, out.len);
    buf_free(&out);
}

/* The director's VERSION: AUTH when this proxy has the ring secret (a
 * director that offers no challenge is refused, so a stranger on its
 * address cannot route this proxy's users), then HELLO. */
static bool greet(struct link *l, const struct ring_msg *m)
{
    if (m->version.major != RING_VERSION_MAJOR) {
        line_client_protocol_error(l->lc, "the director speaks ring protocol %u.%u, not %d.x",
                                   m->version.major, m->version.minor, RING_VERSION_MAJOR);
        return false;
    }
    l->got_version = true;
    const char *secret = l->dc->secret;
    if (secret == NULL || secret[0] == '\0') {
        send_hello(l);
        return true;
    }
    if (m->version.auth == NULL || strcmp(m->version.auth, RING_AUTH_MECH) != 0 ||
        m->version.nonce == NULL) {
        line_client_protocol_error(l->lc, "the director does not authenticate but this proxy "
                                          "has a ring secret");
        return false;
    }
    snprintf(l->director_nonce, sizeof(l->director_nonce), "%s", m->version.nonce);
    struct buf out = {0};
    bool ok = ring_auth_write_answer(&out, secret, l->director_nonce, l->nonce);
    if (ok)
        line_client_write(l->lc, (const char *)out.data, out.len);
    buf_free(&out);
    if (!ok) {
        line_client_protocol_error(l->lc, "no random bytes for the authentication nonce");
        return false;
    }
    send_hello(l);
    l->awaiting_auth_ok = true;
    return true;
}

/* The handshake is done: this director takes lookups, and sessions if it
 * is (or becomes) the primary. */
static void link_ready(struct link *l)
{
    struct director_client *dc = l->dc;
    line_client_mark_up(l->lc);
    if (dc->primary == NO_PRIMARY || dc->primary == l->index || primary_link(dc) == NULL) {
        dc->primary = l->index;
        announce_all(l);
    }
    /* Waiting lookups, oldest last in the list: each goes to the first
     * live director, which may be another one. */
    struct director_lookup *lk = dc->lookups;
    while (lk != NULL) {
        struct director_lookup *next = lk->next;
        if (lk->attempt == NULL)
            dispatch(lk);
        lk = next;
    }
}

static bool link_message(struct link *l, const struct ring_msg *m)
{
    struct director_client *dc = l->dc;
    if (!l->got_version) {
        if (m->type != RING_MSG_VERSION) {
            line_client_protocol_error(l->lc, "the director did not start with VERSION");
            return false;
        }
        return greet(l, m);
    }
    if (l->awaiting_auth_ok) {
        if (m->type == RING_MSG_ERROR) {
            line_client_protocol_error(l->lc, "the director refused: %.150s", m->error.text);
            return false;
        }
        if (m->type != RING_MSG_AUTH_OK ||
            !ring_auth_check(dc->secret, strlen(dc->secret), RING_AUTH_SERVER, l->director_nonce,
                             l->nonce, m->auth_ok.proof)) {
            line_client_protocol_error(l->lc, "the director's proof does not match the ring "
                                              "secret");
            return false;
        }
        l->awaiting_auth_ok = false;
        return true;
    }
    bool up = line_client_is_up(l->lc);
    switch (m->type) {
    case RING_MSG_HOST:
        return true; /* the handshake's backend list: routing asks LOOKUP */
    case RING_MSG_DONE:
        if (!up)
            link_ready(l);
        return true;
    case RING_MSG_LOOKUP_OK: {
        struct director_lookup_result r = {.ok = true,
                                           .ip = m->lookup_ok.ip,
                                           .port = m->lookup_ok.port,
                                           .outcome = m->lookup_ok.outcome};
        lookup_reply(l, m->lookup_ok.id, &r);
        return true;
    }
    case RING_MSG_LOOKUP_FAIL: {
        struct director_lookup_result r = {
            .ok = false,
            .outcome = m->lookup_fail.outcome,
            .retry_ms = m->lookup_fail.retry_ms,
            .error = m->lookup_fail.error != NULL ? m->lookup_fail.error
                                                  : ring_outcome_name(m->lookup_fail.outcome)};
        lookup_reply(l, m->lookup_fail.id, &r);
        return true;
    }
    case RING_MSG_USER_KICKED:
        if (up && dc->ev.user_kicked != NULL)
            dc->ev.user_kicked(dc->ev_arg, m->user_kicked.user);
        return true;
    case RING_MSG_USER_MOVED:
        if (up && dc->ev.user_moved != NULL)
            dc->ev.user_moved(dc->ev_arg, m->user_moved.user, m->user_moved.ip, m->user_moved.port);
        return true;
    case RING_MSG_RING_CHANGE:
        if (up && dc->ev.backend_change != NULL)
            dc->ev.backend_change(dc->ev_arg, m->ring_change.change, &m->ring_change.host);
        return true;
    case RING_MSG_PING: {
        struct ring_msg pong = ring_msg_pong(m);
        send_msg(l, &pong);
        return true;
    }
    case RING_MSG_ERROR: {
        char q[320];
        log_warn(COMPONENT, "director reported an error", "director=%s error=%s",
                 line_client_address(l->lc), log_quote(q, sizeof(q), m->error.text));
        return true;
    }
    default:
        return true; /* PONG, and what a login client does not act on */
    }
}

static bool link_line(void *owner, char *line, size_t len)
{
    struct link *l = owner;
    struct ring_line fields;
    struct ring_msg m;
    struct petrel_error err;
    if (!ring_msg_parse(line, len, RING_LINE_MAX_DEFAULT, &fields, &m, &err)) {
        if (err.code == PETREL_ERR_UNSUPPORTED)
            return true; /* a newer director's verb: ignored, as the protocol says */
        line_client_protocol_error(l->lc, "unreadable line: %s", err.message);
        return false;
    }
    line_client_hold(l->lc);
    bool ok = link_message(l, &m);
    return line_client_drop(l->lc) && ok;
}

/* ---------- the client ---------- */

struct director_client *director_client_new(struct event_base *base,
                                            const struct director_client_config *cfg,
                                            const struct director_client_events *events, void *arg,
                                            struct petrel_error *err)
{
    size_t n = 0;
    while (cfg->addresses != NULL && cfg->addresses[n] != NULL)
        n++;
    if (n == 0 || n > MAX_DIRECTORS) {
        petrel_error_set(err, PETREL_ERR_INVALID, "between 1 and %d directors are needed",
                         MAX_DIRECTORS);
        return NULL;
    }
    if (cfg->timeout_ms <= 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "the director timeout must be positive");
        return NULL;
    }
    struct director_client *dc = xcalloc(1, sizeof(*dc));
    dc->base = base;
    dc->name = xstrdup(cfg->name != NULL && cfg->name[0] != '\0' ? cfg->name : "login");
    dc->secret = xstrdup(cfg->secret != NULL ? cfg->secret : "");
    dc->timeout_ms = cfg->timeout_ms;
    if (events != NULL)
        dc->ev = *events;
    dc->ev_arg = arg;
    dc->sessions = smap_new();
    dc->primary = NO_PRIMARY;
    for (size_t i = 0; i < n; i++) {
        struct link *l = &dc->links[i];
        l->dc = dc;
        l->index = i;
        const struct line_client_config lcfg = {
            .protocol = "ring",
            .peer = "director",
            .address = cfg->addresses[i],
            .timeout_ms = cfg->timeout_ms,
            .max_line = RING_LINE_MAX_DEFAULT,
            .output_max = 4u << 20,
            .keepalive = true,
            .handshake = true,
        };
        l->lc = line_client_new(base, &lcfg, &link_ops, l, err);
        if (l->lc == NULL) {
            director_client_free(dc);
            return NULL;
        }
        dc->link_count++;
        dc->links_alive++;
    }
    for (size_t i = 0; i < n; i++) {
        line_client_keep_connected(dc->links[i].lc, true);
        line_client_ensure(dc->links[i].lc);
    }
    dc->primary_check = event_new(base, -1, EV_PERSIST, check_primary, dc);
    struct timeval tv = {.tv_sec = 0, .tv_usec = PRIMARY_CHECK_MS * 1000};
    event_add(dc->primary_check, &tv);
    return dc;
}

void director_client_free(struct director_client *dc)
{
    if (dc == NULL || dc->freeing)
        return;
    dc->freeing = true;
    if (dc->primary_check != NULL)
        event_free(dc->primary_check);
    dc->primary_check = NULL;
    /* Lookups waiting for a director have no request to fail: answer them
     * here; those in flight are failed by their line-client below. */
    struct director_lookup *lk = dc->lookups;
    while (lk != NULL) {
        struct director_lookup *next = lk->next;
        if (lk->attempt == NULL)
            lookup_fail(lk, "director client closed");
        lk = next;
    }
    if (dc->link_count == 0) {
        smap_free(dc->sessions, session_free);
        free(dc->name);
        ring_secret_free(dc->secret);
        free(dc);
        return;
    }
    size_t count = dc->link_count;
    for (size_t i = 0; i < count; i++)
        line_client_free(dc->links[i].lc);
}

size_t director_client_ready(const struct director_client *dc)
{
    size_t n = 0;
    for (size_t i = 0; i < dc->link_count; i++)
        n += line_client_is_up(dc->links[i].lc) ? 1 : 0;
    return n;
}
