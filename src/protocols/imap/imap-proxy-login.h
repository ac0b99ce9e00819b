/* The IMAP backend dialogue of a login proxy (protocols/common/
 * mail-proxy-login.h): after the backend's greeting, the client's address
 * in ID (x-originating-ip, x-originating-port, x-session-id, x-proxy-ttl,
 * as Dovecot's imap-login sends them) and AUTHENTICATE PLAIN with an
 * initial response (RFC 4959), pipelined; the tagged answer to the login
 * decides. Untagged lines (the ID answer, CAPABILITY) are passed over.
 *
 *   greeting  * OK ...                      -> send ID + AUTHENTICATE
 *             * BYE ... / * PREAUTH / other -> TEMPFAIL / PROTOCOL
 *   P1 <any>  the ID's answer               (ignored: ID is informational)
 *   P2 OK ... -> OK with the text after "P2 OK "
 *   P2 NO [UNAVAILABLE|SERVERBUG|...] ...   -> TEMPFAIL, other NO -> REJECTED
 *   P2 BAD / a continuation "+" / a line over 8 KiB -> PROTOCOL */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_PROXY_LOGIN_H
#define PETREL_PROTOCOLS_IMAP_IMAP_PROXY_LOGIN_H

#include "core/buf.h"
#include "protocols/common/mail-proxy-login.h"

struct imap_proxy_login;

/* Copies what it needs from `params`. */
struct imap_proxy_login *imap_proxy_login_new(const struct mail_proxy_login_params *params);
/* Overwrites the password and frees; NULL is ignored. */
void imap_proxy_login_free(struct imap_proxy_login *pl);
/* One line from the backend, without its CRLF (may hold any byte). Appends
 * the lines to send to `out`; a final step is returned in *result (its
 * step is CONTINUE otherwise). After a final step further lines answer
 * PROTOCOL. */
void imap_proxy_login_line(struct imap_proxy_login *pl, const char *line, size_t len,
                           struct buf *out, struct mail_proxy_login_result *result);

#endif
