#include "clients/auth/auth-sasl.h"

#include "core/base64.h"
#include "core/xalloc.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum sasl_mech sasl_mech_parse(const char *name)
{
    if (strcasecmp(name, "PLAIN") == 0)
        return SASL_MECH_PLAIN;
    if (strcasecmp(name, "LOGIN") == 0)
        return SASL_MECH_LOGIN;
    return SASL_MECH_UNKNOWN;
}

const char *sasl_mech_name(enum sasl_mech mech)
{
    switch (mech) {
    case SASL_MECH_PLAIN:
        return "PLAIN";
    case SASL_MECH_LOGIN:
        return "LOGIN";
    case SASL_MECH_UNKNOWN:
        break;
    }
    return "UNKNOWN";
}

void sasl_exchange_init(struct sasl_exchange *x, enum sasl_mech mech)
{
    memset(x, 0, sizeof(*x));
    x->mech = mech;
}

void sasl_exchange_free(struct sasl_exchange *x)
{
    free(x->username);
    if (x->password != NULL) {
        OPENSSL_cleanse(x->password, strlen(x->password));
        free(x->password);
    }
    x->username = NULL;
    x->password = NULL;
}

static enum sasl_step_result fail(struct sasl_exchange *x, const char *why)
{
    x->error = why;
    return SASL_STEP_FAILED;
}

/* Decodes a response into a NUL-terminated string of `*len` bytes (which
 * may hold NULs, as PLAIN's do). */
static bool decode(const char *b64, struct buf *out, struct sasl_exchange *x)
{
    size_t n = strlen(b64);
    if (n > (SASL_MAX_RESPONSE / 3 + 1) * 4) {
        x->syntax = true;
        x->error = "response too long";
        return false;
    }
    /* Room for the decoded bytes and the NUL up front: growing the buffer
     * later would free a copy of the password without wiping it. */
    buf_reserve(out, n / 4 * 3 + 1);
    if (!base64_decode_append(out, b64, n)) {
        x->syntax = true;
        x->error = "response is not valid base64";
        return false;
    }
    buf_append_char(out, '\0');
    return true;
}

static void wipe(struct buf *b)
{
    if (b->data != NULL)
        OPENSSL_cleanse(b->data, b->cap);
    buf_free(b);
}

/* authzid NUL authcid NUL passwd */
static enum sasl_step_result plain_response(struct sasl_exchange *x, const char *b64)
{
    struct buf raw = {0};
    if (!decode(b64, &raw, x)) {
        wipe(&raw);
        return SASL_STEP_FAILED;
    }
    size_t len = raw.len - 1;
    const char *authzid = raw.data;
    const char *nul1 = memchr(authzid, '\0', len);
    const char *nul2 =
        nul1 == NULL ? NULL : memchr(nul1 + 1, '\0', len - (size_t)(nul1 + 1 - authzid));
    enum sasl_step_result r;
    if (nul1 == NULL || nul2 == NULL) {
        r = fail(x, "malformed PLAIN response");
    } else {
        const char *authcid = nul1 + 1;
        const char *passwd = nul2 + 1;
        if (memchr(passwd, '\0', len - (size_t)(passwd - authzid)) != NULL)
            r = fail(x, "malformed PLAIN response");
        else if (*authcid == '\0')
            r = fail(x, "empty username");
        else if (*authzid != '\0' && strcmp(authzid, authcid) != 0)
            r = fail(x, "authorization identity not supported");
        else {
            x->username = xstrdup(authcid);
            x->password = xstrdup(passwd);
            r = SASL_STEP_DONE;
        }
    }
    wipe(&raw);
    return r;
}

static enum sasl_step_result challenge_with(struct buf *challenge, const char *text)
{
    base64_encode_append(challenge, text, strlen(text));
    return SASL_STEP_CHALLENGE;
}

/* Copies a LOGIN response that must hold no NUL byte. */
static char *login_value(struct sasl_exchange *x, const char *b64)
{
    struct buf raw = {0};
    if (!decode(b64, &raw, x)) {
        wipe(&raw);
        return NULL;
    }
    char *value = NULL;
    if (strlen(raw.data) != raw.len - 1)
        x->error = "NUL byte in LOGIN response";
    else
        value = xstrdup(raw.data);
    wipe(&raw);
    return value;
}

enum sasl_step_result sasl_exchange_step(struct sasl_exchange *x, const char *response_b64,
                                         struct buf *challenge)
{
    int step = x->step++;
    switch (x->mech) {
    case SASL_MECH_PLAIN:
        if (step == 0 && response_b64 == NULL)
            return challenge_with(challenge, "");
        if (step > 1 || response_b64 == NULL)
            return fail(x, "unexpected response");
        return plain_response(x, response_b64);
    case SASL_MECH_LOGIN:
        if (step == 0 && response_b64 == NULL)
            return challenge_with(challenge, "Username:");
        if (x->username == NULL) {
            if (response_b64 == NULL)
                return fail(x, "unexpected response");
            x->username = login_value(x, response_b64);
            if (x->username == NULL)
                return SASL_STEP_FAILED;
            if (x->username[0] == '\0')
                return fail(x, "empty username");
            return challenge_with(challenge, "Password:");
        }
        if (response_b64 == NULL || x->password != NULL)
            return fail(x, "unexpected response");
        x->password = login_value(x, response_b64);
        return x->password == NULL ? SASL_STEP_FAILED : SASL_STEP_DONE;
    case SASL_MECH_UNKNOWN:
        break;
    }
    return fail(x, "unsupported mechanism");
}

bool sasl_response_syntax_error(const struct sasl_exchange *x)
{
    return x->syntax;
}
