/* Internals of the LMTP front of the login proxy: the proxy, one client
 * transaction's routing state (lmtp-proxy.c) and its backend transactions
 * (lmtp-proxy-backend.c). One transaction has at most one RCPT in flight
 * (the session is parked meanwhile), so a backend serves one request at a
 * time. */
#ifndef PETREL_PROTOCOLS_LMTP_PROXY_PRIVATE_H
#define PETREL_PROTOCOLS_LMTP_PROXY_PRIVATE_H

#include "core/metrics.h"
#include "protocols/common/login-metrics.h"
#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-private.h"
#include "protocols/lmtp/lmtp-proxy-client.h"
#include "protocols/lmtp/lmtp-proxy.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LMTP_PROXY_COMPONENT "login"
#define LMTP_PROXY_RETRY_MS 150 /* between backend set-up attempts (document 2) */

struct lmtp_proxy {
    struct lmtp_server *srv;
    const struct lmtp_proxy_config *cfg;
    struct lmtp_proxy_deps deps;
    struct event_base *base;
    struct metrics_registry *registry;
    struct login_metrics m; /* protocol lmtp */
};

enum lmtp_proxy_backend_state {
    LMTP_PROXY_B_SETUP,  /* dialling, or between greeting and MAIL */
    LMTP_PROXY_B_RETRY,  /* waiting LMTP_PROXY_RETRY_MS before the next attempt */
    LMTP_PROXY_B_READY,  /* MAIL accepted: RCPT, DATA */
    LMTP_PROXY_B_RCPT,   /* a RCPT in flight */
    LMTP_PROXY_B_DATA,   /* DATA sent, or the message going out, or results coming */
    LMTP_PROXY_B_DONE,   /* every result in */
    LMTP_PROXY_B_FAILED, /* unusable: its recipients get `fail` */
};

struct lmtp_proxy_txn;

/* One backend's transaction. */
struct lmtp_proxy_backend {
    struct lmtp_proxy_txn *t;
    struct lmtp_proxy_backend *next;
    char ip[64];
    unsigned port;
    enum lmtp_proxy_backend_state state;
    struct net_dialer *dialer;
    struct bufferevent *bev;
    struct tls_handshake_deadline *handshake;
    struct lmtp_proxy_client *dlg;
    struct event *timer; /* retry wait, or the deadline of what is awaited */
    int attempts;        /* set-up attempts made */
    bool connected;
    int64_t t0_us;      /* start of the phase being timed (clock_mono_us) */
    char fail[320];     /* "451 4.4.1 ..." without the address: for its recipients */
    bool fail_has_code; /* `fail` starts with a code and an enhanced code */
    /* after DATA: one reply per accepted recipient, in their order */
    char **results;
    size_t result_count;
    size_t accepted;
    /* the message going out */
    struct lmtp_data_encoder enc;
    uint64_t offset;
    bool sending;
};

/* Where an accepted RCPT went: its backend and its place among that
 * backend's accepted recipients. */
struct lmtp_proxy_route {
    struct lmtp_proxy_backend *b;
    size_t k;
};

/* What a client session's transaction keeps (lmtp_session.front_state). */
struct lmtp_proxy_txn {
    struct lmtp_proxy *p;
    struct lmtp_session *s;
    /* the RCPT in flight */
    bool pending;
    struct lmtp_recipient_name name;
    char *user;
    struct auth_client_request *auth_req;
    struct director_lookup *lookup;
    int64_t lookup_start_us;
    char *tag;                          /* the user's director_tag */
    struct event *relookup;             /* a user being moved: the lookup again after retry_ms */
    struct lmtp_proxy_backend *waiting; /* the backend the RCPT waits for */
    struct lmtp_proxy_backend *backends;
    struct lmtp_proxy_route *routes; /* like s->rcpts */
    size_t route_cap;
    bool forwarding;     /* after DATA: the message goes to the backends */
    size_t data_busy;    /* backends still busy with the message */
    struct event *defer; /* answers after DATA, always from the loop */
};

/* ---------- backend transactions (lmtp-proxy-backend.c) ---------- */

/* Starts the set-up of a transaction with ip:port (first attempt now). */
struct lmtp_proxy_backend *lmtp_proxy_backend_new(struct lmtp_proxy_txn *t, const char *ip,
                                                  unsigned port);
/* Sends RCPT TO:<address> (state READY). */
void lmtp_proxy_backend_rcpt(struct lmtp_proxy_backend *b, const char *address);
/* Sends DATA, then the message of t->s when the backend says 354. */
void lmtp_proxy_backend_data(struct lmtp_proxy_backend *b);
/* Drops the connection and frees (the backend forgets an unfinished
 * transaction). */
void lmtp_proxy_backend_free(struct lmtp_proxy_backend *b);

/* ---------- what a backend tells its transaction (lmtp-proxy.c) ---------- */

void lmtp_proxy_txn_backend_ready(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b);
/* The backend is unusable (b->fail says what its recipients get). */
void lmtp_proxy_txn_backend_failed(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b);
/* The answer to the RCPT in flight ("250 2.1.5 ..."): `line` without CRLF. */
void lmtp_proxy_txn_backend_rcpt(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b, int code,
                                 const char *line);
/* Every result after the message is in (or b failed meanwhile). */
void lmtp_proxy_txn_backend_done(struct lmtp_proxy_txn *t, struct lmtp_proxy_backend *b);

#endif
