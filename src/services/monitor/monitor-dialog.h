/* The conversation of one health probe with a backend, as a pure state
 * machine: it is fed the server's reply lines and answers with the lines to
 * send, until it reaches a verdict. No sockets, so it is unit-tested and
 * fuzzed on its own; monitor-probe.c drives it over a connection.
 *
 *   IMAP: greeting `* OK` (or `* PREAUTH`); `m1 LOGIN "user" "password"`
 *         (quoted strings, `"` and `\` escaped); tagged OK; `m2 LOGOUT`
 *   POP3: greeting `+OK`; `USER user`; `+OK`; `PASS password`; `+OK`; `QUIT`
 *   LMTP: greeting `220` (multi-line `220-` allowed); `LHLO petrel-monitor`;
 *         `250` (multi-line); `QUIT`
 *
 * Without credentials (no entry for the backend's tag and no "" entry) an
 * IMAP or POP3 probe stops after the greeting (LOGOUT / QUIT); LMTP has no
 * login and always does LHLO. The verdict is decided as soon as the health
 * question is answered (the LOGIN, PASS or LHLO reply, or a bad greeting);
 * the polite goodbye that follows does not change it, and the connection
 * closing or the deadline passing during the goodbye does not either.
 * Untagged IMAP lines (`* CAPABILITY ...`) are skipped. Keywords are
 * compared case-insensitively. */
#ifndef PETREL_SERVICES_MONITOR_DIALOG_H
#define PETREL_SERVICES_MONITOR_DIALOG_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>

enum monitor_protocol {
    MONITOR_PROTO_IMAP,
    MONITOR_PROTO_POP3,
    MONITOR_PROTO_LMTP,
};
#define MONITOR_PROTO_COUNT 3

/* The result of one probe; also the `result` label of
 * petrel_monitor_probes_total. */
enum monitor_result {
    MONITOR_RESULT_OK,
    MONITOR_RESULT_CONNECT_ERROR,  /* refused, unreachable */
    MONITOR_RESULT_TIMEOUT,        /* no verdict within `timeout` */
    MONITOR_RESULT_TLS_ERROR,      /* handshake failed (or certificate refused) */
    MONITOR_RESULT_BAD_GREETING,   /* not `* OK`, `+OK`, `220` */
    MONITOR_RESULT_REJECTED,       /* LOGIN NO, USER/PASS -ERR, LHLO not 250 */
    MONITOR_RESULT_PROTOCOL_ERROR, /* an unexpected or over-long reply */
    MONITOR_RESULT_CLOSED,         /* the server closed before the verdict */
};
#define MONITOR_RESULT_COUNT 8

enum monitor_dialog_action {
    MONITOR_DIALOG_READ,   /* send what was appended to `out` (if anything), read on */
    MONITOR_DIALOG_FINISH, /* done: close; the verdict is final */
};

struct monitor_dialog {
    enum monitor_protocol proto;
    const char *user;     /* borrowed; NULL: connect and greeting only */
    const char *password; /* borrowed */
    int step;
    bool decided;
    enum monitor_result verdict;
    char detail[200]; /* why it failed, for logs: printable excerpt of the server's reply */
};

/* `user`/`password` may be NULL (no credentials); ignored for LMTP. */
void monitor_dialog_init(struct monitor_dialog *d, enum monitor_protocol proto, const char *user,
                         const char *password);
/* One line from the server without its line end; it may hold any byte.
 * Appends the lines to send (CRLF-terminated) to `out`. */
enum monitor_dialog_action monitor_dialog_line(struct monitor_dialog *d, const char *line,
                                               size_t len, struct buf *out);
/* The server closed the connection: the final verdict (CLOSED unless
 * decided before). */
enum monitor_result monitor_dialog_closed(struct monitor_dialog *d);
/* The deadline passed: the final verdict (TIMEOUT unless decided before). */
enum monitor_result monitor_dialog_timed_out(struct monitor_dialog *d);

/* "imap", "pop3", "lmtp". */
const char *monitor_protocol_name(enum monitor_protocol p);
/* "ok", "connect_error", "timeout", "tls_error", "bad_greeting", "rejected",
 * "protocol_error", "closed". */
const char *monitor_result_name(enum monitor_result r);

#endif
