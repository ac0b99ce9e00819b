/* Server side of the SASL mechanisms the auth service offers: PLAIN
 * (RFC 4616) and LOGIN (draft-murchison-sasl-login). Pure: turns the
 * client's base64 responses into challenges and, at the end, a username
 * and password. Authorization identities (acting as another user) are
 * refused: master-user login is not offered. */
#ifndef PETREL_CLIENTS_AUTH_SASL_H
#define PETREL_CLIENTS_AUTH_SASL_H

#include "core/buf.h"

#include <stdbool.h>

#define SASL_MAX_RESPONSE 8192 /* decoded bytes per response */

enum sasl_mech {
    SASL_MECH_UNKNOWN = 0,
    SASL_MECH_PLAIN,
    SASL_MECH_LOGIN,
};

enum sasl_step_result {
    SASL_STEP_CHALLENGE, /* send `challenge` (base64) and wait for a response */
    SASL_STEP_DONE,      /* username and password are set */
    SASL_STEP_FAILED,    /* `error` says why; the exchange is over */
};

struct sasl_exchange {
    enum sasl_mech mech;
    int step;
    char *username; /* owned */
    char *password; /* owned; wiped on free */
    const char *error;
    bool syntax; /* the failure was a response that is no base64 (or too long) */
};

/* Case-insensitive "PLAIN" / "LOGIN". */
enum sasl_mech sasl_mech_parse(const char *name);
const char *sasl_mech_name(enum sasl_mech mech);

void sasl_exchange_init(struct sasl_exchange *x, enum sasl_mech mech);
/* Wipes the password and frees what the exchange holds. */
void sasl_exchange_free(struct sasl_exchange *x);

/* Feeds the next client response (base64 text; NULL when the client sent
 * no initial response, "" for an empty one). A challenge is appended to
 * `challenge` as base64. */
enum sasl_step_result sasl_exchange_step(struct sasl_exchange *x, const char *response_b64,
                                         struct buf *challenge);
/* After SASL_STEP_FAILED: true when the response could not be decoded
 * (the client's syntax: IMAP BAD), false when it decoded to no valid name
 * and password (a failed login, as the auth service answers it). */
bool sasl_response_syntax_error(const struct sasl_exchange *x);

#endif
