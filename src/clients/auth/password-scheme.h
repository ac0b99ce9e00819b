/* Password schemes: PLAIN, SHA512-CRYPT, BLF-CRYPT, CRYPT (yescrypt and any
 * crypt(3) hash libcrypt knows), ARGON2ID. Stored passwords carry a
 * `{SCHEME}` prefix; a bare value uses the passdb's default scheme. Every
 * function is thread-safe and may take tens of milliseconds (the hashing
 * schemes are slow by design): call them from worker threads only. */
#ifndef PETREL_CLIENTS_AUTH_PASSWORD_SCHEME_H
#define PETREL_CLIENTS_AUTH_PASSWORD_SCHEME_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

enum password_scheme {
    PASSWORD_SCHEME_UNKNOWN = 0,
    PASSWORD_SCHEME_PLAIN,
    PASSWORD_SCHEME_SHA512_CRYPT,
    PASSWORD_SCHEME_BLF_CRYPT,
    PASSWORD_SCHEME_CRYPT, /* crypt(3): yescrypt `$y$`, and `$6$`/`$2b$`/... */
    PASSWORD_SCHEME_ARGON2ID,
};

enum password_verdict {
    PASSWORD_MATCH,
    PASSWORD_MISMATCH,
    PASSWORD_INVALID, /* unknown scheme or malformed stored hash */
};

/* "PLAIN", "SHA512-CRYPT", ... (the canonical spelling). */
const char *password_scheme_name(enum password_scheme s);
/* Case-insensitive; aliases "BLF-CRYPT"/"BCRYPT", "ARGON2ID". UNKNOWN when not a scheme. */
enum password_scheme password_scheme_parse(const char *name);

/* Splits `stored` into its scheme and the hash text after the prefix. A
 * bare value takes `default_scheme`. UNKNOWN when the prefix names no scheme. */
enum password_scheme password_stored_scheme(const char *stored, enum password_scheme default_scheme,
                                            const char **hash_out);

/* Checks `password` against `stored`; constant time in the compared bytes.
 * *scheme_out (may be NULL) receives the scheme used (for metrics). */
enum password_verdict password_verify(const char *stored, const char *password,
                                      enum password_scheme default_scheme,
                                      enum password_scheme *scheme_out);

/* Hashes `password` with a fresh random salt into "{SCHEME}hash"
 * (allocated). Costs: SHA512-CRYPT 5000 rounds, BLF-CRYPT cost 10, CRYPT =
 * yescrypt default, ARGON2ID t=3 m=64 MiB p=1. NULL with err on failure. */
char *password_hash(enum password_scheme scheme, const char *password, struct petrel_error *err);

#endif
