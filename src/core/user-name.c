/* The user-name rule (user-name.h). */
#include "core/user-name.h"

#include "core/utf8.h"

#include <stdint.h>
#include <string.h>

bool user_name_valid(const char *name, size_t max_len, struct petrel_error *err)
{
    size_t len = strlen(name);
    if (len == 0 || len > max_len)
        return petrel_error_set(err, PETREL_ERR_INVALID, "user must be 1 to %zu bytes", max_len);
    if (name[0] == '.')
        return petrel_error_set(err, PETREL_ERR_INVALID, "user must not start with '.'");
    const unsigned char *p = (const unsigned char *)name;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_decode(p + i, len - i, &cp);
        if (n == 0)
            return petrel_error_set(err, PETREL_ERR_INVALID, "user must be valid UTF-8");
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == '/' || cp == '\\')
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "user must not contain '/', '\\' or control characters");
        i += n;
    }
    return true;
}
