/* Keyword rules shared by every driver and front end (mail-flags.h). */
#include "storage/mail-flags.h"

#include <string.h>

bool mail_keyword_valid(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MAIL_KEYWORD_MAX_LEN)
        return false;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        if (*p <= 0x20 || *p >= 0x7f || strchr("(){%*\"\\]", *p) != NULL)
            return false;
    }
    return true;
}
