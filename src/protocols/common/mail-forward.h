/* The client's real address as a login proxy forwards it to a backend:
 * IMAP ID fields (`x-originating-ip`, `x-originating-port`,
 * `x-session-id`/`x-session-ext-id`, `x-proxy-ttl`) and the XCLIENT
 * attributes of POP3 and LMTP (`ADDR`, `PORT`, `SESSION`, `TTL`), as
 * Dovecot's proxies send them and Postfix's XCLIENT_README defines them.
 *
 * The parsers only check and collect; whether the sender may use them is
 * the caller's business (a peer in `login_trusted_networks`: anyone else
 * could forge their address, docs/security.md). Unknown names are ignored,
 * as Dovecot does, so a proxy may send more than this backend uses. */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_FORWARD_H
#define PETREL_PROTOCOLS_COMMON_MAIL_FORWARD_H

#include <stdbool.h>
#include <stddef.h>

/* The longest session id accepted (Dovecot's are 22 base64 characters;
 * a proxy may add a suffix). */
#define MAIL_FORWARD_SESSION_MAX 47

struct mail_forward {
    char ip[64];                                /* canonical text; "" when not given */
    unsigned port;                              /* 0 when not given */
    char session[MAIL_FORWARD_SESSION_MAX + 1]; /* "" when not given */
    int ttl;                                    /* -1 when not given */
};

/* Empties `f` (nothing forwarded). */
void mail_forward_init(struct mail_forward *f);

/* One IMAP ID field/value pair (RFC 2971; names case-insensitive). False
 * with a static reason in *why when a known field has a bad value (an
 * address that is not an IP, a port outside 1..65535, a session id with
 * characters outside [A-Za-z0-9+/=_-] or longer than the maximum, a TTL
 * that is not a number 0..100); `f` is then unchanged for that field. A
 * NULL value (NIL) is ignored. */
bool mail_forward_id_field(struct mail_forward *f, const char *name, const char *value,
                           const char **why);

/* How XCLIENT values are written: Postfix's XCLIENT (SMTP, LMTP) encodes
 * them as RFC 3461 xtext; Dovecot's POP3 XCLIENT sends them as they are
 * (a session id such as "WVhMAT5hB+N/AAAC" arrives with its "+"). */
enum mail_forward_values { MAIL_FORWARD_XTEXT, MAIL_FORWARD_RAW };

/* The arguments of an XCLIENT command (`ADDR=192.0.2.1 PORT=4711 ...`,
 * space separated, values encoded as `values` says; `ADDR` may carry
 * Postfix's `IPV6:` prefix; `[UNAVAILABLE]` and `[TEMPUNAVAIL]` leave the
 * attribute unset). Names are case-insensitive. False with a static reason
 * in *why on a malformed attribute (no `=`, bad xtext, a bad value as
 * above); `f` may then hold the attributes before it and should be
 * dropped. */
bool mail_forward_xclient(struct mail_forward *f, enum mail_forward_values values, const char *args,
                          size_t len, const char **why);

/* "ip:port" or "[ip]:port" of `f` into `out` (the ip alone without a port). */
void mail_forward_format_peer(const struct mail_forward *f, char *out, size_t size);

#endif
