/* Ring authentication (ring-auth.h). */
#include "clients/ring/ring-auth.h"

#include "core/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LABEL "petrel-ring-auth"

static void to_hex(const unsigned char *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

bool ring_auth_nonce(char out[RING_AUTH_HEX_LEN + 1])
{
    unsigned char raw[RING_AUTH_NONCE_BYTES];
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return false;
    to_hex(raw, sizeof(raw), out);
    return true;
}

void ring_auth_proof(const char *secret, size_t secret_len, enum ring_auth_role role,
                     const char *server_nonce, const char *client_nonce,
                     char out[RING_AUTH_HEX_LEN + 1])
{
    /* NUL separators: no field can contain one, so the message is unambiguous. */
    const char *who = role == RING_AUTH_CLIENT ? "client" : "server";
    unsigned char msg[sizeof(LABEL) + 7 + 2 * (RING_AUTH_HEX_LEN + 1)];
    size_t n = 0;
    memcpy(msg + n, LABEL, sizeof(LABEL));
    n += sizeof(LABEL);
    memcpy(msg + n, who, strlen(who) + 1);
    n += strlen(who) + 1;
    memcpy(msg + n, server_nonce, RING_AUTH_HEX_LEN);
    n += RING_AUTH_HEX_LEN;
    msg[n++] = '\0';
    memcpy(msg + n, client_nonce, RING_AUTH_HEX_LEN);
    n += RING_AUTH_HEX_LEN;
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t mac_len = 0;
    if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, secret, secret_len, msg, n, mac, sizeof(mac),
                  &mac_len) == NULL ||
        mac_len * 2 != RING_AUTH_HEX_LEN)
        petrel_fatal("HMAC-SHA256 is not available from OpenSSL");
    to_hex(mac, mac_len, out);
    OPENSSL_cleanse(mac, sizeof(mac));
}

bool ring_auth_check(const char *secret, size_t secret_len, enum ring_auth_role role,
                     const char *server_nonce, const char *client_nonce, const char *received)
{
    if (!ring_auth_hex_valid(received))
        return false;
    char want[RING_AUTH_HEX_LEN + 1];
    ring_auth_proof(secret, secret_len, role, server_nonce, client_nonce, want);
    bool ok = CRYPTO_memcmp(want, received, RING_AUTH_HEX_LEN) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    return ok;
}

/* ---------- the secret ---------- */

static bool read_file(const char *path, const char *what, char **out, struct petrel_error *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return petrel_error_set(err, PETREL_ERR_IO, "%s: cannot read the ring secret file %s: %s",
                                what, path, strerror(errno));
    /* unbuffered: no copy of the secret left in a stdio buffer that fclose frees unwiped */
    setvbuf(f, NULL, _IONBF, 0);
    char *data = xmalloc(RING_SECRET_MAX + 1);
    size_t n = fread(data, 1, RING_SECRET_MAX + 1, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || n > RING_SECRET_MAX) {
        OPENSSL_cleanse(data, RING_SECRET_MAX + 1);
        free(data);
        if (bad)
            return petrel_error_set(err, PETREL_ERR_IO, "%s: cannot read the ring secret file %s",
                                    what, path);
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "%s: the ring secret file %s is larger than %d bytes", what, path,
                                RING_SECRET_MAX);
    }
    if (memchr(data, '\0', n) != NULL) {
        /* strlen() would cut the secret at the NUL: a raw binary file (`openssl rand 32`)
         * would silently become a short or empty secret */
        OPENSSL_cleanse(data, RING_SECRET_MAX + 1);
        free(data);
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "%s: the ring secret file %s holds a NUL byte: write the secret "
                                "as text (e.g. `openssl rand -hex 32`)",
                                what, path);
    }
    size_t start = 0;
    while (start < n && isspace((unsigned char)data[start]))
        start++;
    while (n > start && isspace((unsigned char)data[n - 1]))
        n--;
    *out = xstrndup(data + start, n - start);
    OPENSSL_cleanse(data, RING_SECRET_MAX + 1);
    free(data);
    return true;
}

bool ring_secret_load(const char *file, const char *env, const char *what, char **out,
                      struct petrel_error *err)
{
    *out = NULL;
    const char *source = file;
    bool ok;
    char name[256];
    snprintf(name, sizeof(name), "%s_FILE", env);
    const char *env_file = env[0] != '\0' ? getenv(name) : NULL;
    if (file != NULL && file[0] != '\0') {
        ok = read_file(file, what, out, err);
    } else if (env_file != NULL && env_file[0] != '\0') {
        source = name;
        ok = read_file(env_file, name, out, err);
    } else {
        source = env;
        const char *value = env[0] != '\0' ? getenv(env) : NULL;
        *out = xstrdup(value != NULL ? value : "");
        ok = true;
    }
    if (!ok)
        return false;
    size_t len = strlen(*out);
    if (len > 0 && len < RING_SECRET_MIN) {
        ring_secret_free(*out);
        *out = NULL;
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "%s: the ring secret from %s is %zu bytes, at least %d are needed "
                                "(e.g. `openssl rand -hex 32`)",
                                what, source, len, RING_SECRET_MIN);
    }
    return true;
}

void ring_secret_free(char *secret)
{
    if (secret == NULL)
        return;
    OPENSSL_cleanse(secret, strlen(secret));
    free(secret);
}

bool ring_auth_write_answer(struct buf *out, const char *secret, const char *director_nonce,
                            char nonce[RING_AUTH_HEX_LEN + 1])
{
    if (!ring_auth_nonce(nonce))
        return false;
    char proof[RING_AUTH_HEX_LEN + 1];
    ring_auth_proof(secret, strlen(secret), RING_AUTH_CLIENT, director_nonce, nonce, proof);
    struct ring_msg m = {.type = RING_MSG_AUTH};
    m.auth.mech = RING_AUTH_MECH;
    m.auth.nonce = nonce;
    m.auth.proof = proof;
    ring_msg_write(out, &m);
    return true;
}
