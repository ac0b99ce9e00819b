/* Password schemes on top of libxcrypt (crypt_rn, crypt_gensalt_rn) and
 * libargon2. Every call works on its own heap state, so any number of worker
 * threads may verify at once.
 *
 * Verdicts for crypt(3) hashes: crypt_rn reads only the setting (scheme,
 * cost, salt) from the stored hash and recomputes the whole string, so a
 * well-formed stored hash and the result always have the same length. A
 * length difference (or a crypt failure) therefore means the stored hash is
 * malformed: INVALID. Equal lengths are compared in constant time. */
#include "clients/auth/password-scheme.h"

#include "core/xalloc.h"

#include <argon2.h>
#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Costs of freshly made hashes (the header's contract). */
#define SHA512_CRYPT_ROUNDS 5000
#define BLF_CRYPT_COST 10
#define ARGON2ID_T_COST 3
#define ARGON2ID_M_COST_KIB (64 * 1024)
#define ARGON2ID_PARALLELISM 1
#define ARGON2ID_SALT_BYTES 16
#define ARGON2ID_HASH_BYTES 32

/* A stored Argon2 hash names its own memory cost; one typo'd (or hostile)
 * record must not make a worker allocate gigabytes. */
#define ARGON2_MAX_M_COST_KIB (1024 * 1024)
#define ARGON2_MAX_T_COST 64
#define ARGON2_MAX_PARALLELISM 64

/* The longest scheme name inside `{...}` worth looking at. */
#define SCHEME_NAME_MAX 32

struct scheme_name {
    const char *name;
    enum password_scheme scheme;
};

/* Canonical spellings first: password_scheme_name returns the first match. */
static const struct scheme_name scheme_names[] = {
    {"PLAIN", PASSWORD_SCHEME_PLAIN},
    {"SHA512-CRYPT", PASSWORD_SCHEME_SHA512_CRYPT},
    {"BLF-CRYPT", PASSWORD_SCHEME_BLF_CRYPT},
    {"CRYPT", PASSWORD_SCHEME_CRYPT},
    {"ARGON2ID", PASSWORD_SCHEME_ARGON2ID},
    /* Aliases Dovecot installations use. */
    {"CLEAR", PASSWORD_SCHEME_PLAIN},
    {"CLEARTEXT", PASSWORD_SCHEME_PLAIN},
    {"BCRYPT", PASSWORD_SCHEME_BLF_CRYPT},
};

const char *password_scheme_name(enum password_scheme s)
{
    for (size_t i = 0; i < sizeof(scheme_names) / sizeof(scheme_names[0]); i++) {
        if (scheme_names[i].scheme == s)
            return scheme_names[i].name;
    }
    return "UNKNOWN";
}

enum password_scheme password_scheme_parse(const char *name)
{
    if (name == NULL)
        return PASSWORD_SCHEME_UNKNOWN;
    for (size_t i = 0; i < sizeof(scheme_names) / sizeof(scheme_names[0]); i++) {
        if (strcasecmp(scheme_names[i].name, name) == 0)
            return scheme_names[i].scheme;
    }
    return PASSWORD_SCHEME_UNKNOWN;
}

enum password_scheme password_stored_scheme(const char *stored, enum password_scheme default_scheme,
                                            const char **hash_out)
{
    if (stored == NULL) {
        if (hash_out != NULL)
            *hash_out = "";
        return PASSWORD_SCHEME_UNKNOWN;
    }
    const char *close = stored[0] == '{' ? strchr(stored, '}') : NULL;
    if (close == NULL) {
        /* No prefix: a bare hash (or a PLAIN password that happens to start
         * with '{' but never closes it). */
        if (hash_out != NULL)
            *hash_out = stored;
        return default_scheme;
    }
    if (hash_out != NULL)
        *hash_out = close + 1;
    size_t len = (size_t)(close - stored - 1);
    if (len == 0 || len > SCHEME_NAME_MAX)
        return PASSWORD_SCHEME_UNKNOWN;
    char name[SCHEME_NAME_MAX + 1];
    memcpy(name, stored + 1, len);
    name[len] = '\0';
    return password_scheme_parse(name);
}

static enum password_verdict verify_plain(const char *hash, const char *password)
{
    /* Digests have a fixed length, so the comparison neither stops early
     * nor depends on how long either password is. */
    unsigned char want[SHA256_DIGEST_LENGTH];
    unsigned char got[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)hash, strlen(hash), want);
    SHA256((const unsigned char *)password, strlen(password), got);
    bool same = CRYPTO_memcmp(want, got, sizeof(want)) == 0;
    OPENSSL_cleanse(got, sizeof(got));
    return same ? PASSWORD_MATCH : PASSWORD_MISMATCH;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool is_bcrypt_hash(const char *hash)
{
    return has_prefix(hash, "$2a$") || has_prefix(hash, "$2b$") || has_prefix(hash, "$2y$");
}

/* crypt_rn into a heap crypt_data (about 32 KiB: too big for thread
 * stacks), cleared before it is freed because it holds the passphrase. */
static enum password_verdict verify_crypt(const char *hash, const char *password)
{
    if (hash[0] == '\0')
        return PASSWORD_INVALID;
    if (strlen(password) >= CRYPT_MAX_PASSPHRASE_SIZE) {
        /* libcrypt refuses such passphrases, so none of its hashes can be
         * of one. */
        return PASSWORD_MISMATCH;
    }
    struct crypt_data *data = xcalloc(1, sizeof(*data));
    const char *out = crypt_rn(password, hash, data, (int)sizeof(*data));
    enum password_verdict verdict;
    size_t hash_len = strlen(hash);
    if (out == NULL || out[0] == '*' || strlen(out) != hash_len)
        verdict = PASSWORD_INVALID;
    else if (CRYPTO_memcmp(out, hash, hash_len) == 0)
        verdict = PASSWORD_MATCH;
    else
        verdict = PASSWORD_MISMATCH;
    OPENSSL_cleanse(data, sizeof(*data));
    free(data);
    return verdict;
}

/* Reads "name=<decimal>" at *p, advancing past it. */
static bool read_param(const char **p, const char *name, unsigned long *out)
{
    size_t nlen = strlen(name);
    if (strncmp(*p, name, nlen) != 0 || (*p)[nlen] != '=')
        return false;
    const char *q = *p + nlen + 1;
    if (*q < '0' || *q > '9')
        return false;
    unsigned long v = 0;
    for (; *q >= '0' && *q <= '9'; q++) {
        if (v > 0xFFFFFFFFUL / 10)
            return false;
        v = v * 10 + (unsigned long)(*q - '0');
    }
    *out = v;
    *p = q;
    return true;
}

/* "$argon2id$v=19$m=65536,t=3,p=1$salt$hash" with costs inside our limits.
 * libargon2 checks the rest. */
static bool argon2_costs_acceptable(const char *hash)
{
    const char *p = hash + strlen("$argon2id$");
    unsigned long v, m, t, par;
    if (read_param(&p, "v", &v)) {
        if (*p != '$')
            return false;
        p++;
    }
    if (!read_param(&p, "m", &m) || *p++ != ',' || !read_param(&p, "t", &t) || *p++ != ',' ||
        !read_param(&p, "p", &par))
        return false;
    return m <= ARGON2_MAX_M_COST_KIB && t <= ARGON2_MAX_T_COST && par <= ARGON2_MAX_PARALLELISM;
}

static enum password_verdict verify_argon2id(const char *hash, const char *password)
{
    if (!has_prefix(hash, "$argon2id$") || !argon2_costs_acceptable(hash))
        return PASSWORD_INVALID;
    int rc = argon2_verify(hash, password, strlen(password), Argon2_id);
    if (rc == ARGON2_OK)
        return PASSWORD_MATCH;
    if (rc == ARGON2_VERIFY_MISMATCH)
        return PASSWORD_MISMATCH;
    return PASSWORD_INVALID;
}

enum password_verdict password_verify(const char *stored, const char *password,
                                      enum password_scheme default_scheme,
                                      enum password_scheme *scheme_out)
{
    if (scheme_out != NULL)
        *scheme_out = PASSWORD_SCHEME_UNKNOWN;
    if (stored == NULL || password == NULL)
        return PASSWORD_INVALID;
    const char *hash;
    enum password_scheme scheme = password_stored_scheme(stored, default_scheme, &hash);
    if (scheme_out != NULL)
        *scheme_out = scheme;
    switch (scheme) {
    case PASSWORD_SCHEME_PLAIN:
        return verify_plain(hash, password);
    case PASSWORD_SCHEME_SHA512_CRYPT:
        if (!has_prefix(hash, "$6$"))
            return PASSWORD_INVALID;
        return verify_crypt(hash, password);
    case PASSWORD_SCHEME_BLF_CRYPT:
        if (!is_bcrypt_hash(hash))
            return PASSWORD_INVALID;
        return verify_crypt(hash, password);
    case PASSWORD_SCHEME_CRYPT:
        return verify_crypt(hash, password);
    case PASSWORD_SCHEME_ARGON2ID:
        return verify_argon2id(hash, password);
    case PASSWORD_SCHEME_UNKNOWN:
        break;
    }
    return PASSWORD_INVALID;
}

static char *hash_crypt(enum password_scheme scheme, const char *prefix, unsigned long count,
                        const char *password, struct petrel_error *err)
{
    if (strlen(password) >= CRYPT_MAX_PASSPHRASE_SIZE) {
        petrel_error_set(err, PETREL_ERR_INVALID, "password longer than %d bytes",
                         CRYPT_MAX_PASSPHRASE_SIZE - 1);
        return NULL;
    }
    char setting[CRYPT_GENSALT_OUTPUT_SIZE];
    /* NULL random bytes: libcrypt reads them from the kernel itself. */
    if (crypt_gensalt_rn(prefix, count, NULL, 0, setting, (int)sizeof(setting)) == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot make a %s salt", password_scheme_name(scheme));
        return NULL;
    }
    struct crypt_data *data = xcalloc(1, sizeof(*data));
    const char *out = crypt_rn(password, setting, data, (int)sizeof(*data));
    char *result = NULL;
    if (out == NULL || out[0] == '*')
        petrel_error_set(err, PETREL_ERR_IO, "%s hashing failed", password_scheme_name(scheme));
    else
        result = xasprintf("{%s}%s", password_scheme_name(scheme), out);
    OPENSSL_cleanse(data, sizeof(*data));
    free(data);
    return result;
}

static char *hash_argon2id(const char *password, struct petrel_error *err)
{
    unsigned char salt[ARGON2ID_SALT_BYTES];
    if (RAND_bytes(salt, sizeof(salt)) != 1) {
        petrel_error_set(err, PETREL_ERR_IO, "no random bytes for an ARGON2ID salt");
        return NULL;
    }
    size_t enc_len = argon2_encodedlen(ARGON2ID_T_COST, ARGON2ID_M_COST_KIB, ARGON2ID_PARALLELISM,
                                       sizeof(salt), ARGON2ID_HASH_BYTES, Argon2_id);
    char *encoded = xmalloc(enc_len);
    int rc = argon2id_hash_encoded(ARGON2ID_T_COST, ARGON2ID_M_COST_KIB, ARGON2ID_PARALLELISM,
                                   password, strlen(password), salt, sizeof(salt),
                                   ARGON2ID_HASH_BYTES, encoded, enc_len);
    char *result = NULL;
    if (rc != ARGON2_OK)
        petrel_error_set(err, PETREL_ERR_IO, "ARGON2ID hashing failed: %s",
                         argon2_error_message(rc));
    else
        result = xasprintf("{%s}%s", password_scheme_name(PASSWORD_SCHEME_ARGON2ID), encoded);
    free(encoded);
    return result;
}

char *password_hash(enum password_scheme scheme, const char *password, struct petrel_error *err)
{
    if (password == NULL) {
        petrel_error_set(err, PETREL_ERR_INVALID, "no password to hash");
        return NULL;
    }
    switch (scheme) {
    case PASSWORD_SCHEME_PLAIN:
        return xasprintf("{%s}%s", password_scheme_name(scheme), password);
    case PASSWORD_SCHEME_SHA512_CRYPT:
        return hash_crypt(scheme, "$6$", SHA512_CRYPT_ROUNDS, password, err);
    case PASSWORD_SCHEME_BLF_CRYPT:
        return hash_crypt(scheme, "$2b$", BLF_CRYPT_COST, password, err);
    case PASSWORD_SCHEME_CRYPT:
        /* Count 0: libcrypt's default yescrypt cost. */
        return hash_crypt(scheme, "$y$", 0, password, err);
    case PASSWORD_SCHEME_ARGON2ID:
        return hash_argon2id(password, err);
    case PASSWORD_SCHEME_UNKNOWN:
        break;
    }
    petrel_error_set(err, PETREL_ERR_INVALID, "unknown password scheme");
    return NULL;
}
