/* IMAP dates (SEARCH's "1-Feb-1994") and date-times (INTERNALDATE and
 * APPEND's "17-Jul-1996 02:44:25 -0700"), pure conversions without the
 * process's time zone or locale. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_DATE_H
#define PETREL_PROTOCOLS_IMAP_IMAP_DATE_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "1-Feb-1994" / "01-Feb-1994" (month case-insensitive) into days since
 * 1970-01-01. False for anything else, including impossible days. */
bool imap_date_parse(const char *s, size_t len, int32_t *day);

/* The date-time of APPEND, quotes removed: "17-Jul-1996 02:44:25 -0700"
 * (the day may be " 7", "7" or "07"). *t is seconds since the epoch (UTC),
 * *tz_minutes the zone's offset (-420 here). */
bool imap_datetime_parse(const char *s, size_t len, int64_t *t, int *tz_minutes);

/* Appends `t` as seen in a zone `tz_minutes` east of UTC, without quotes:
 * "17-Jul-1996 02:44:25 -0700". */
void imap_datetime_format(struct buf *out, int64_t t, int tz_minutes);

/* Days since 1970-01-01 for a proleptic Gregorian date (no validation). */
int64_t imap_days_from_civil(int64_t year, unsigned month, unsigned day);

#endif
