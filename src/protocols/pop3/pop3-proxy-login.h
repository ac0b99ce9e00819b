/* The POP3 backend dialogue of a login proxy (protocols/common/
 * mail-proxy-login.h): Dovecot's way. A greeting "+OK [XCLIENT] ..." says
 * the backend believes this proxy: XCLIENT ADDR/PORT/SESSION/TTL first
 * (raw values, as Dovecot's pop3-login sends them); then AUTH PLAIN with an
 * initial response (RFC 5034).
 *
 *   greeting +OK ...            -> [XCLIENT ...] then AUTH PLAIN <b64>
 *            -ERR ... / other   -> TEMPFAIL / PROTOCOL
 *   XCLIENT  +OK                -> (the AUTH follows it, pipelined)
 *            -ERR ...           -> PROTOCOL (the backend does not trust us)
 *   AUTH     +OK ...            -> OK with the text after "+OK "
 *            -ERR [SYS/TEMP] .. -> TEMPFAIL; other -ERR -> REJECTED
 *            "+ " (a challenge) -> PROTOCOL */
#ifndef PETREL_PROTOCOLS_POP3_POP3_PROXY_LOGIN_H
#define PETREL_PROTOCOLS_POP3_POP3_PROXY_LOGIN_H

#include "core/buf.h"
#include "protocols/common/mail-proxy-login.h"

struct pop3_proxy_login;

struct pop3_proxy_login *pop3_proxy_login_new(const struct mail_proxy_login_params *params);
void pop3_proxy_login_free(struct pop3_proxy_login *pl);
/* As imap_proxy_login_line(). */
void pop3_proxy_login_line(struct pop3_proxy_login *pl, const char *line, size_t len,
                           struct buf *out, struct mail_proxy_login_result *result);

#endif
