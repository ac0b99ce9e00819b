/* One LMTP transaction with one backend, the client side of the login
 * proxy's LMTP front (lmtp-proxy.h), as a pure state machine: the proxy
 * feeds it each line the backend sends and writes whatever it appends to
 * `out`; no I/O, so it is unit-tested and fuzzed on its own.
 *
 *   greeting 220               -> LHLO
 *   LHLO     250 (`starttls`)  -> STARTTLS, 220 -> STARTTLS: the caller
 *                                 layers TLS and calls
 *                                 lmtp_proxy_client_tls_started() -> LHLO
 *                                 (a backend not offering it: SETUP_FAILED,
 *                                 nothing goes in clear text)
 *            250 (XCLIENT)     -> XCLIENT ADDR PORT SESSION TTL (xtext,
 *                                 Postfix's XCLIENT_README), 220 -> LHLO again
 *            250               -> MAIL FROM:<sender> [BODY=8BITMIME] [SMTPUTF8]
 *   MAIL     250               -> READY: lmtp_proxy_client_rcpt() one at a time
 *   RCPT     any reply         -> RCPT (2xx counts as accepted)
 *   DATA     354               -> DATA_GO: the caller sends the message
 *                                 (lmtp_data_encode) and calls
 *                                 lmtp_proxy_client_data_sent()
 *            other             -> DATA_REFUSED (for every accepted recipient)
 *   after "." one reply per accepted RCPT, in order -> RESULT (the last with
 *                                 `done`), RFC 2033 4.2
 * A refusal before READY is SETUP_FAILED (`code` says 4xx or 5xx; 0 for a
 * broken reply sequence). Replies are RFC 5321 4.2 lines "ddd text" or
 * "ddd-text" continued with the same code; a line over
 * LMTP_PROXY_CLIENT_LINE_MAX, holding a NUL or a control byte, with a bad
 * code, too many continuation lines, or arriving when no reply is due is
 * PROTOCOL: the connection is not to be used again. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_PROXY_CLIENT_H
#define PETREL_PROTOCOLS_LMTP_LMTP_PROXY_CLIENT_H

#include "core/buf.h"
#include "protocols/common/mail-forward.h"

#include <stdbool.h>
#include <stddef.h>

#define LMTP_PROXY_CLIENT_LINE_MAX 2048 /* a reply line without CRLF */
#define LMTP_PROXY_CLIENT_LINES_MAX 64  /* lines of one (multi-line) reply */

struct lmtp_proxy_client_params {
    const char *helo;           /* the proxy's LHLO name */
    const char *sender;         /* MAIL FROM without brackets ("" for <>) */
    bool body_8bit;             /* BODY=8BITMIME */
    bool smtputf8;              /* SMTPUTF8 */
    bool starttls;              /* TLS before anything else (login.backend_tls) */
    struct mail_forward client; /* the real client, sent when XCLIENT is offered */
};

enum lmtp_proxy_client_event {
    LMTP_PROXY_CLIENT_CONTINUE,     /* send what was appended; nothing else to do */
    LMTP_PROXY_CLIENT_READY,        /* MAIL accepted: recipients may go */
    LMTP_PROXY_CLIENT_SETUP_FAILED, /* greeting, LHLO, STARTTLS, XCLIENT or MAIL refused */
    LMTP_PROXY_CLIENT_STARTTLS,     /* 220 to STARTTLS: start TLS, then tls_started() */
    LMTP_PROXY_CLIENT_RCPT,         /* the answer to the RCPT in flight */
    LMTP_PROXY_CLIENT_DATA_GO,      /* 354: send the message */
    LMTP_PROXY_CLIENT_DATA_REFUSED, /* DATA refused: the reply holds for every recipient */
    LMTP_PROXY_CLIENT_RESULT,       /* one accepted recipient's answer after the message */
    LMTP_PROXY_CLIENT_PROTOCOL,     /* broken reply: close the connection */
};

struct lmtp_proxy_client_result {
    enum lmtp_proxy_client_event event;
    int code;         /* the reply code; 0 for CONTINUE/PROTOCOL */
    bool mail_stage;  /* SETUP_FAILED: it was MAIL that was refused */
    bool done;        /* RESULT: the last one expected */
    const char *text; /* the reply's last line without the code ("2.1.5 OK"), or why it
                       * broke; valid until the next call */
};

struct lmtp_proxy_client;

struct lmtp_proxy_client *lmtp_proxy_client_new(const struct lmtp_proxy_client_params *params);
void lmtp_proxy_client_free(struct lmtp_proxy_client *c); /* NULL is ignored */

/* One backend line (without its LF; a CR before it is dropped here). */
void lmtp_proxy_client_line(struct lmtp_proxy_client *c, const char *line, size_t len,
                            struct buf *out, struct lmtp_proxy_client_result *result);
/* TLS is up after STARTTLS: appends the new LHLO (RFC 3207 4.2). */
void lmtp_proxy_client_tls_started(struct lmtp_proxy_client *c, struct buf *out);
/* Appends RCPT TO:<address>. Only when READY and no RCPT is in flight:
 * false (nothing appended) otherwise. */
bool lmtp_proxy_client_rcpt(struct lmtp_proxy_client *c, const char *address, struct buf *out);
/* Appends DATA. Only when READY with an accepted recipient and no RCPT in
 * flight: false otherwise. */
bool lmtp_proxy_client_data(struct lmtp_proxy_client *c, struct buf *out);
/* The message and its final "." went out after DATA_GO: the results come. */
void lmtp_proxy_client_data_sent(struct lmtp_proxy_client *c);
/* Recipients the backend accepted. */
size_t lmtp_proxy_client_accepted(const struct lmtp_proxy_client *c);
/* Appends QUIT; every later line is ignored (CONTINUE). */
void lmtp_proxy_client_quit(struct lmtp_proxy_client *c, struct buf *out);

#endif
