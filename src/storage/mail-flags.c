/* System flag names and keyword rules shared by every driver and front
 * end (mail-flags.h). */
#include "storage/mail-flags.h"

#include <string.h>
#include <strings.h>

#define FLAG_NAME(bit, name)                                                                       \
    {                                                                                              \
        (bit), (name), sizeof(name) - 1                                                            \
    }

const struct mail_flag_name mail_flag_names[MAIL_FLAG_NAME_COUNT] = {
    FLAG_NAME(MAIL_FLAG_ANSWERED, "\\Answered"), FLAG_NAME(MAIL_FLAG_FLAGGED, "\\Flagged"),
    FLAG_NAME(MAIL_FLAG_DELETED, "\\Deleted"),   FLAG_NAME(MAIL_FLAG_SEEN, "\\Seen"),
    FLAG_NAME(MAIL_FLAG_DRAFT, "\\Draft"),
};

uint32_t mail_flag_by_name(const char *name)
{
    for (size_t i = 0; i < MAIL_FLAG_NAME_COUNT; i++) {
        if (strcasecmp(name, mail_flag_names[i].name) == 0)
            return mail_flag_names[i].bit;
    }
    return 0;
}

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
