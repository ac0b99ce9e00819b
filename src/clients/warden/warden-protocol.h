/* The warden line protocol (docs/warden-protocol.md), shared by the warden
 * and its client: one request or reply per LF-terminated line, fields
 * separated by TAB, each field escaped so it can hold any byte but NUL
 * (`\\`, `\t`, `\n`, `\r`), as in the auth protocol (the framing both
 * share: net/line-fields.h) and the director ring.
 * The first field is the verb, the second the request id; a request whose
 * id is "-" gets no reply unless it fails.
 *
 *   HELLO       <id> <major> <instance> <boot-id>             -> OK <id> <major>
 *   CONNECT     <id> <session> <user> <ip> <service> <connected-at>  -> OK <id>
 *   DISCONNECT  <id> <session>                                 -> OK <id>
 *   LIST        <id> [service=] [user=]     -> SESSION <id> <session> <user> <ip> <service>
 *                                              <connected-at> ... DONE <id> <count>
 *   COUNT       <id> [by=protocol|user] [service=] [user=]
 *                                           -> ITEM <id> <key> <count> ... DONE <id> <total>
 *   PENALTY-GET <id> <ip>|user:<user>                          -> PENALTY <id> <failures>
 *   PENALTY-INC <id> <ip>|user:<user>                          -> PENALTY <id> <failures>
 *   any                                                        -> ERROR <id> <reason>
 *
 * Parameters after the positional fields are `key=value`; unknown ones are
 * ignored so a newer peer can add some. This module only frames and
 * validates: it keeps no state. */
#ifndef PETREL_CLIENTS_WARDEN_PROTOCOL_H
#define PETREL_CLIENTS_WARDEN_PROTOCOL_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WARDEN_PROTOCOL_MAJOR 1
#define WARDEN_PROTOCOL_NAME "petrel-warden"
#define WARDEN_LINE_MAX 65536 /* the largest line either side accepts, escaped, without LF */
#define WARDEN_LINE_MIN 1024  /* the smallest configurable line limit */
#define WARDEN_MAX_FIELDS 16
#define WARDEN_ID_MAX 32               /* request ids */
#define WARDEN_SESSION_ID_MAX 64       /* session ids */
#define WARDEN_INSTANCE_MAX 128        /* HELLO instance names */
#define WARDEN_BOOT_ID_MAX 64          /* HELLO boot ids */
#define WARDEN_USER_MAX 1024           /* user names in CONNECT */
#define WARDEN_TIME_MAX 253402300799LL /* 9999-12-31T23:59:59Z */

struct warden_line {
    size_t count;
    char *fields[WARDEN_MAX_FIELDS]; /* unescaped, NUL-terminated, point into the line */
};

/* Splits one line (without its LF) in place and unescapes each field.
 * line[len] must be writable (the LF's place): it ends the last field.
 * False with a reason in err: empty, longer than `max_len`, more than
 * WARDEN_MAX_FIELDS fields, a NUL byte, a bad or escaped-NUL escape. */
bool warden_line_parse(char *line, size_t len, size_t max_len, struct warden_line *out,
                       struct petrel_error *err);

/* Appends `field` escaped; a TAB goes before it unless `out` is empty or
 * ends with LF. */
void warden_line_add(struct buf *out, const char *field);
/* Appends "key=value" as one escaped field. */
void warden_line_add_param(struct buf *out, const char *key, const char *value);
/* Appends a decimal number as one field. */
void warden_line_add_uint(struct buf *out, uint64_t value);
/* Ends the line (LF). */
void warden_line_end(struct buf *out);
/* The value of parameter `key` among fields[first..], or NULL. */
const char *warden_line_param(const struct warden_line *line, size_t first, const char *key);

/* ---------- field rules ---------- */

/* Request ids: "-" or 1..WARDEN_ID_MAX bytes of [A-Za-z0-9_.-]. */
bool warden_request_id_valid(const char *id);
/* Session ids and boot ids: 1..max bytes of [A-Za-z0-9_.:@-]. */
bool warden_token_valid(const char *s, size_t max);
/* Services a session may have: imap, pop3, submission, lmtp. */
bool warden_service_valid(const char *service);
/* The services above, NULL-terminated, in a fixed order. */
extern const char *const warden_services[];
/* User names: the user-name rule (core/user-name.h) with WARDEN_USER_MAX
 * bytes at most. */
bool warden_user_valid(const char *user);
/* "" or an IPv4/IPv6 address in text form. */
bool warden_ip_valid(const char *ip, bool allow_empty);
/* A penalty key: an IP address, or "user:" and a valid user name (the
 * failed logins of one account, from any address). */
bool warden_penalty_key_valid(const char *key);
/* Instance names: 1..WARDEN_INSTANCE_MAX printable bytes (no control
 * characters, no space). */
bool warden_instance_valid(const char *instance);
/* A decimal integer 0..max without sign or leading zeros. */
bool warden_parse_uint(const char *text, uint64_t max, uint64_t *out);

/* ---------- requests ---------- */

enum warden_verb {
    WARDEN_HELLO,
    WARDEN_CONNECT,
    WARDEN_DISCONNECT,
    WARDEN_LIST,
    WARDEN_COUNT,
    WARDEN_PENALTY_GET,
    WARDEN_PENALTY_INC,
    WARDEN_VERB_COUNT,
};

/* "HELLO", "CONNECT", ... */
const char *warden_verb_name(enum warden_verb verb);

enum warden_count_by {
    WARDEN_BY_NONE,
    WARDEN_BY_PROTOCOL,
    WARDEN_BY_USER,
};

/* A request with every field validated; strings point into the line. */
struct warden_request {
    enum warden_verb verb;
    const char *id;
    /* HELLO */
    uint64_t major;
    const char *instance;
    const char *boot_id;
    /* CONNECT, DISCONNECT (session_id only) */
    const char *session_id;
    const char *user;    /* also the LIST/COUNT filter (NULL: any) */
    const char *ip;      /* also PENALTY-GET/INC: an IP or "user:<user>" */
    const char *service; /* also the LIST/COUNT filter (NULL: any) */
    int64_t connected_at;
    /* COUNT */
    enum warden_count_by by;
};

/* Reads a parsed request line. False with a reason in err (and *verb_out,
 * when not NULL, set to the verb if it was known, else WARDEN_VERB_COUNT):
 * unknown verb, bad id, missing or bad field. When the id itself was
 * usable, *id_out (when not NULL) points to it so the error can be
 * answered; otherwise it is NULL. */
bool warden_request_read(const struct warden_line *line, struct warden_request *out,
                         const char **id_out, struct petrel_error *err);
/* Writes `req` as one line (the client side). */
void warden_request_write(struct buf *out, const struct warden_request *req);

/* ---------- replies ---------- */

enum warden_reply_kind {
    WARDEN_REPLY_OK,      /* OK <id> [major] */
    WARDEN_REPLY_ERROR,   /* ERROR <id> <reason> */
    WARDEN_REPLY_SESSION, /* SESSION <id> <session> <user> <ip> <service> <connected-at> */
    WARDEN_REPLY_ITEM,    /* ITEM <id> <key> <count> */
    WARDEN_REPLY_DONE,    /* DONE <id> <count> */
    WARDEN_REPLY_PENALTY, /* PENALTY <id> <failures> */
};

struct warden_reply {
    enum warden_reply_kind kind;
    const char *id;
    const char *reason;     /* ERROR */
    uint64_t number;        /* OK: major (0 when absent); ITEM, DONE: count; PENALTY: failures */
    const char *key;        /* ITEM */
    const char *session_id; /* SESSION */
    const char *user;
    const char *ip;
    const char *service;
    int64_t connected_at;
};

/* Reads a parsed reply line; false with a reason for anything else. */
bool warden_reply_read(const struct warden_line *line, struct warden_reply *out,
                       struct petrel_error *err);
/* Writes `reply` as one line (the server side). */
void warden_reply_write(struct buf *out, const struct warden_reply *reply);

#endif
