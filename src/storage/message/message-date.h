/* RFC 5322 date-time parsing (section 3.3 with the obsolete forms of 4.3)
 * for ENVELOPE and SEARCH SENT*: day of week optional, two- and three-digit
 * years (RFC 5322 4.3: < 50 is 20xx, otherwise 19xx / + 1900), seconds
 * optional, numeric zones and the zone names UT, GMT, Z, EST, EDT, CST,
 * CDT, MST, MDT, PST, PDT and military letters (as +0000), comments and
 * extra blanks anywhere. Pure; no locale, no libc time zone. */
#ifndef PETREL_STORAGE_MESSAGE_DATE_H
#define PETREL_STORAGE_MESSAGE_DATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses `len` bytes at `s` (a Date: header value). On success sets *epoch
 * to the instant in seconds since 1970 UTC and *zone_minutes to the
 * offset east of UTC the sender wrote (-0430 -> -270; a missing zone is 0).
 * False when no valid date-time is there (ranges checked, zones within ±23:59, years
 * 1900..9999). */
bool message_date_parse(const char *s, size_t len, int64_t *epoch, int *zone_minutes);

/* Days since 1970-01-01 of a proleptic Gregorian date (month 1..12). */
int64_t message_date_days_from_civil(int64_t year, unsigned month, unsigned day);

#endif
