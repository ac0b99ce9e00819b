/* The director's ring protocol (docs/ring-protocol.md), port 9102: the
 * line codec shared by the director, the monitor, login proxies and peer
 * directors. Pure functions, no I/O, fuzzable.
 *
 * One message per LF-terminated line, fields separated by TAB, every field
 * escaped so it can hold any byte but NUL (`\\`, `\t`, `\n`, `\r`). The
 * first field is the verb; positional fields follow, then optional
 * `key=value` parameters (a receiver ignores parameters it does not know).
 * Both sides' first line is `VERSION petrel-ring <major> <minor>`; a
 * director with a ring secret adds `auth=hmac-sha256 nonce=<hex>` to its
 * own and the client answers with AUTH before HELLO (ring-auth.h); the
 * client's last handshake line is `HELLO <kind> <name>`. Messages:
 *
 *   VERSION       petrel-ring <major> <minor> [auth=] [nonce=]      both
 *   AUTH          <mech> <client nonce> <client proof>              client -> director
 *   AUTH-OK       <director proof>                                  director -> client
 *   HELLO         <kind> <name>                                     client -> director
 *   HOST          <ip> <port> <tag> <vhosts> <state> <last_updown>  director -> client (handshake)
 *   DONE                                                            end of the handshake
 *   RING-CHANGE   <up|flush|down> <ip> <port> <tag> <vhosts> <last_updown> <origin> <seq>
 *   USER-MOVED    <user> <hash> <ip> <port> <origin> <seq>
 *   USER-KICKED   <user> <hash> <origin> <seq>
 *   LOOKUP        <id> <user> [tag=]                                login -> director
 *   LOOKUP-OK     <id> <ip> <port> <tag> <sticky|assigned>
 *   LOOKUP-FAIL   <id> <killing|no_backends|bad_request> [retry_ms=] [error=]
 *   SESSION-START <sid> <user> <ip> <imap|imaps|pop3|pop3s|lmtp>   login -> director
 *   SESSION-END   <sid>
 *   BACKEND-FLUSH <ip> [reason=]                                    monitor -> director
 *   BACKEND-UP    <ip>
 *   PING [<token>]  PONG [<token>]                                  both
 *   ERROR         <text>                                            both
 *   USER          <hash> <ip> <port> <expires_at> <0|1 weak>        director -> director
 * (handshake)
 *
 * Decoded messages point into the line they were parsed from: the line
 * buffer must outlive the struct ring_msg. */
#ifndef PETREL_CLIENTS_RING_RING_PROTOCOL_H
#define PETREL_CLIENTS_RING_RING_PROTOCOL_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_PROTOCOL_NAME "petrel-ring"
#define RING_VERSION_MAJOR 1
#define RING_VERSION_MINOR 1 /* 1.1: AUTH, AUTH-OK, VERSION auth= nonce= */

/* Authentication (docs/ring-protocol.md#authentication): the one mechanism,
 * and the sizes of its nonces and proofs as lower-case hex on the wire. */
#define RING_AUTH_MECH "hmac-sha256"
#define RING_AUTH_NONCE_BYTES 32
#define RING_AUTH_HEX_LEN 64 /* a nonce (32 bytes) or a proof (SHA-256) in hex */

#define RING_LINE_MAX_DEFAULT 8192 /* escaped bytes per line without the LF */
#define RING_MAX_FIELDS 64         /* fields per line, verb included */
#define RING_ID_MAX 32             /* LOOKUP ids and session ids: [A-Za-z0-9_.-] */
#define RING_NAME_MAX 255          /* HELLO names, origins, tags, users, texts (codec bound) */

/* Who is on the other side, announced by HELLO. */
enum ring_kind {
    RING_KIND_LOGIN,    /* a login proxy: LOOKUP, SESSION-*, receives USER-* */
    RING_KIND_MONITOR,  /* the health monitor: BACKEND-FLUSH/UP, receives RING-CHANGE */
    RING_KIND_DIRECTOR, /* a peer director (ring sync, see docs/ring-protocol.md) */
};

enum ring_backend_state { RING_STATE_UP, RING_STATE_FLUSH };

/* RING-CHANGE variants: `up`/`flush` insert or update the backend with the
 * given fields and that state; `down` removes it. */
enum ring_change { RING_CHANGE_UP, RING_CHANGE_FLUSH, RING_CHANGE_DOWN };

/* Lookup outcomes, also the `outcome` label of petrel_director_lookup_seconds. */
enum ring_outcome {
    RING_OUTCOME_STICKY,      /* an existing mapping answered */
    RING_OUTCOME_ASSIGNED,    /* the hash ring chose a backend (new mapping) */
    RING_OUTCOME_KILLING,     /* the user is being moved: retry after retry_ms */
    RING_OUTCOME_NO_BACKENDS, /* no backend up for the user's tag */
    RING_OUTCOME_BAD_REQUEST, /* the request was malformed */
};
#define RING_OUTCOME_COUNT 5

/* Session protocols counted by petrel_director_backend_sessions. */
enum ring_session_protocol {
    RING_PROTO_IMAP,
    RING_PROTO_IMAPS,
    RING_PROTO_POP3,
    RING_PROTO_POP3S,
    RING_PROTO_LMTP,
};
#define RING_PROTO_COUNT 5

enum ring_msg_type {
    RING_MSG_VERSION,
    RING_MSG_HELLO,
    RING_MSG_HOST,
    RING_MSG_DONE,
    RING_MSG_RING_CHANGE,
    RING_MSG_USER_MOVED,
    RING_MSG_USER_KICKED,
    RING_MSG_LOOKUP,
    RING_MSG_LOOKUP_OK,
    RING_MSG_LOOKUP_FAIL,
    RING_MSG_SESSION_START,
    RING_MSG_SESSION_END,
    RING_MSG_BACKEND_FLUSH,
    RING_MSG_BACKEND_UP,
    RING_MSG_PING,
    RING_MSG_PONG,
    RING_MSG_ERROR,
    RING_MSG_USER,    /* director to director handshake: one user mapping */
    RING_MSG_AUTH,    /* client's answer to the director's challenge */
    RING_MSG_AUTH_OK, /* the director's proof: authentication succeeded */
};

/* A backend as HOST and RING-CHANGE carry it. `ip` is a valid IPv4/IPv6
 * literal, port 1..65535, tag possibly empty. */
struct ring_host {
    const char *ip;
    unsigned port;
    const char *tag;
    uint32_t vhosts;
    enum ring_backend_state state; /* HOST; for RING-CHANGE derived from the change */
    int64_t last_updown_change;    /* unix seconds */
};

struct ring_msg {
    enum ring_msg_type type;
    union {
        struct {
            unsigned major, minor;
            const char *auth;  /* `auth=` mechanism offered by a director; NULL when absent */
            const char *nonce; /* `nonce=`: RING_AUTH_HEX_LEN lower-case hex; NULL when absent */
        } version;             /* the protocol name is checked by the decoder */
        struct {
            const char *mech;  /* 1..RING_NAME_MAX bytes (the director accepts RING_AUTH_MECH) */
            const char *nonce; /* the client's nonce, RING_AUTH_HEX_LEN lower-case hex */
            const char *proof; /* the client's proof, RING_AUTH_HEX_LEN lower-case hex */
        } auth;
        struct {
            const char *proof; /* the director's proof, RING_AUTH_HEX_LEN lower-case hex */
        } auth_ok;
        struct {
            enum ring_kind kind;
            const char *name;
        } hello;
        struct ring_host host;
        struct {
            enum ring_change change;
            struct ring_host host;
            const char *origin; /* "<ip>:<port>" ring address of the director that made it */
            uint64_t seq;       /* the origin's sequence number, 1, 2, ... */
        } ring_change;
        struct {
            const char *user;
            uint32_t hash;
            const char *ip;
            unsigned port;
            const char *origin;
            uint64_t seq;
        } user_moved;
        struct {
            const char *user;
            uint32_t hash;
            const char *origin;
            uint64_t seq;
        } user_kicked;
        struct {
            const char *id;
            const char *user;
            const char *tag; /* "" when absent */
        } lookup;
        struct {
            const char *id;
            const char *ip;
            unsigned port;
            const char *tag;
            enum ring_outcome outcome; /* sticky or assigned */
        } lookup_ok;
        struct {
            const char *id;
            enum ring_outcome outcome; /* killing, no_backends or bad_request */
            uint32_t retry_ms;         /* 0 when absent */
            const char *error;         /* NULL when absent */
        } lookup_fail;
        struct {
            const char *sid;
            const char *user;
            const char *ip;
            enum ring_session_protocol protocol;
        } session_start;
        struct {
            const char *sid;
        } session_end;
        struct {
            const char *ip;
            const char *reason; /* NULL when absent */
        } backend_flush;
        struct {
            const char *ip;
        } backend_up;
        struct {
            const char *token; /* NULL when absent */
        } ping;                /* PING and PONG */
        struct {
            const char *text;
        } error;
        struct {
            uint32_t hash;
            const char *ip;
            unsigned port;
            int64_t expires_at; /* unix seconds */
            bool weak;
        } user;
    };
};

struct ring_line {
    size_t count;
    char *fields[RING_MAX_FIELDS]; /* unescaped, NUL-terminated, inside the line */
};

/* Splits one line (without its LF) in place and unescapes each field.
 * line[len] must be writable (it ends the last field). False with a reason
 * in err: longer than line_max, more than RING_MAX_FIELDS fields, a bad
 * escape, a NUL byte, an empty line. */
bool ring_line_split(char *line, size_t len, size_t line_max, struct ring_line *out,
                     struct petrel_error *err);

/* Decodes split fields into a typed message, validating every field (known
 * verb, field count, numbers in range, IP literals, ids, names up to
 * RING_NAME_MAX bytes). An unknown verb fails with PETREL_ERR_UNSUPPORTED,
 * anything else malformed with PETREL_ERR_INVALID. Pointers in out point
 * into `line`'s fields. */
bool ring_msg_decode(const struct ring_line *line, struct ring_msg *out, struct petrel_error *err);

/* ring_line_split + ring_msg_decode. */
bool ring_msg_parse(char *line, size_t len, size_t line_max, struct ring_line *fields,
                    struct ring_msg *out, struct petrel_error *err);

/* Appends `msg` as one escaped line, LF included. Writing what
 * ring_msg_decode produced and decoding it again gives the same message. */
void ring_msg_write(struct buf *out, const struct ring_msg *msg);

/* Convenience writers for the lines every side sends. */
void ring_write_version(struct buf *out);
void ring_write_hello(struct buf *out, enum ring_kind kind, const char *name);

/* The PONG that answers the PING `ping` (its token echoed). */
struct ring_msg ring_msg_pong(const struct ring_msg *ping);

/* Names on the wire (and in metric labels) and their inverses; the parsers
 * return false for an unknown name. */
const char *ring_kind_name(enum ring_kind kind);
bool ring_kind_parse(const char *s, enum ring_kind *out);
const char *ring_state_name(enum ring_backend_state state);
bool ring_state_parse(const char *s, enum ring_backend_state *out);
const char *ring_change_name(enum ring_change change);
bool ring_change_parse(const char *s, enum ring_change *out);
const char *ring_outcome_name(enum ring_outcome outcome);
bool ring_outcome_parse(const char *s, enum ring_outcome *out);
const char *ring_protocol_name(enum ring_session_protocol proto);
bool ring_protocol_parse(const char *s, enum ring_session_protocol *out);
const char *ring_msg_verb(enum ring_msg_type type);

/* Exactly RING_AUTH_HEX_LEN lower-case hex digits (a nonce or a proof). */
bool ring_auth_hex_valid(const char *s);

/* Request and session ids: 1..RING_ID_MAX bytes of [A-Za-z0-9_.-]. */
bool ring_id_valid(const char *id);
/* An IPv4 or IPv6 literal (no brackets, no zone). */
bool ring_ip_valid(const char *ip);

#endif
