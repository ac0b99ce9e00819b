/* Authentication on the director's ring port (docs/ring-protocol.md,
 * "Authentication"): a shared secret read from a file, proven by both ends
 * with HMAC-SHA256 over two fresh nonces, one chosen by each side.
 *
 *   director -> VERSION petrel-ring 1 1 auth=hmac-sha256 nonce=<Ns>
 *   client   -> AUTH hmac-sha256 <Nc> <HMAC(secret, "client" Ns Nc)>
 *   director -> AUTH-OK <HMAC(secret, "server" Ns Nc)>
 *
 * The director's nonce makes a recorded client proof useless on the next
 * connection (no replay); the client's nonce does the same for the
 * director's proof; the role label inside the MAC keeps a proof made by one
 * side from being played back as the other's (no reflection). Proofs are
 * compared in constant time. The exchange authenticates the two ends, not
 * the bytes that follow (no TLS): see the decision in docs/decisions.md.
 *
 * Used by the director's ring server and its peer links and by the
 * monitor's link; pure functions apart from the random nonces. */
#ifndef PETREL_CLIENTS_RING_RING_AUTH_H
#define PETREL_CLIENTS_RING_RING_AUTH_H

#include "core/error.h"
#include "clients/ring/ring-protocol.h"

#include <stdbool.h>
#include <stddef.h>

#define RING_SECRET_MIN 16   /* bytes: shorter secrets are refused at start */
#define RING_SECRET_MAX 4096 /* bytes of a secret file */

enum ring_auth_role { RING_AUTH_CLIENT, RING_AUTH_SERVER };

/* A fresh nonce: RING_AUTH_NONCE_BYTES from RAND_bytes as lower-case hex.
 * False when the random generator fails (the connection must be refused). */
bool ring_auth_nonce(char out[RING_AUTH_HEX_LEN + 1]);

/* The proof `role` sends for the nonce pair (both RING_AUTH_HEX_LEN hex):
 * HMAC-SHA256(secret, "petrel-ring-auth\0" role "\0" server_nonce "\0"
 * client_nonce) as lower-case hex. */
void ring_auth_proof(const char *secret, size_t secret_len, enum ring_auth_role role,
                     const char *server_nonce, const char *client_nonce,
                     char out[RING_AUTH_HEX_LEN + 1]);

/* A client's answer to a director's challenge: a fresh nonce into
 * `nonce` and the AUTH line (mech, nonce, proof) appended to `out`. False
 * when the random generator fails (nothing appended). */
bool ring_auth_write_answer(struct buf *out, const char *secret, const char *director_nonce,
                            char nonce[RING_AUTH_HEX_LEN + 1]);

/* True when `received` is the proof `role` must send for these nonces;
 * the comparison takes the same time wherever the proofs differ. */
bool ring_auth_check(const char *secret, size_t secret_len, enum ring_auth_role role,
                     const char *server_nonce, const char *client_nonce, const char *received);

/* The ring secret: the file `file` when not empty, else the file named by
 * the variable `<env>_FILE`, else the variable `env` itself (the same order
 * as the director's API token). Surrounding white space is trimmed. *out is
 * a fresh string, "" when none is configured. False with err when a named
 * file cannot be read, is larger than RING_SECRET_MAX or holds a NUL byte
 * (the secret is text), or when the secret
 * is shorter than RING_SECRET_MIN bytes. `what` names the setting in
 * messages ("director.ring.secret_file"). The secret is never put in err. */
bool ring_secret_load(const char *file, const char *env, const char *what, char **out,
                      struct petrel_error *err);

/* Overwrites and frees a secret from ring_secret_load (NULL is fine). */
void ring_secret_free(char *secret);

#endif
