#include "protocols/imap/imap-date.h"

#include <strings.h>

static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Howard Hinnant's days_from_civil: exact for every year. */
int64_t imap_days_from_civil(int64_t year, unsigned month, unsigned day)
{
    year -= month <= 2;
    int64_t era = (year >= 0 ? year : year - 399) / 400;
    unsigned yoe = (unsigned)(year - era * 400);
    unsigned doy = (153 * (month + (month > 2 ? -3u : 9u)) + 2) / 5 + day - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *year, unsigned *month, unsigned *day)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *day = doy - (153 * mp + 2) / 5 + 1;
    *month = mp < 10 ? mp + 3 : mp - 9;
    *year = (int64_t)yoe + era * 400 + (*month <= 2);
}

static unsigned days_in_month(int64_t year, unsigned month)
{
    static const unsigned days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

static bool digits(const char *s, size_t n, unsigned *out)
{
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* day "-" month "-" year at s[*i]; `fixed` also allows a leading space. */
static bool parse_date_part(const char *s, size_t len, size_t *i, bool fixed, int64_t *days)
{
    size_t k = *i;
    unsigned day = 0;
    if (fixed && k < len && s[k] == ' ')
        k++;
    size_t start = k;
    while (k < len && k - start < 3 && s[k] >= '0' && s[k] <= '9')
        k++;
    if (k - start < 1 || k - start > 2 || !digits(s + start, k - start, &day))
        return false;
    if (start > *i && k - start != 1)
        return false; /* " 07" */
    if (len - k < 9 || s[k] != '-' || s[k + 4] != '-')
        return false;
    unsigned month = 0;
    for (unsigned m = 0; m < 12; m++)
        if (strncasecmp(s + k + 1, months[m], 3) == 0)
            month = m + 1;
    unsigned year = 0;
    if (month == 0 || !digits(s + k + 5, 4, &year))
        return false;
    if (day < 1 || day > days_in_month(year, month))
        return false;
    *days = imap_days_from_civil(year, month, day);
    *i = k + 9;
    return true;
}

bool imap_date_parse(const char *s, size_t len, int32_t *day)
{
    size_t i = 0;
    int64_t days = 0;
    if (!parse_date_part(s, len, &i, false, &days) || i != len)
        return false;
    *day = (int32_t)days;
    return true;
}

bool imap_datetime_parse(const char *s, size_t len, int64_t *t, int *tz_minutes)
{
    size_t i = 0;
    int64_t days = 0;
    if (!parse_date_part(s, len, &i, true, &days))
        return false;
    /* SP hh:mm:ss SP (+|-)hhmm */
    if (len - i != 15 || s[i] != ' ' || s[i + 3] != ':' || s[i + 6] != ':' || s[i + 9] != ' ')
        return false;
    unsigned hh = 0, mm = 0, ss = 0, zh = 0, zm = 0;
    if (!digits(s + i + 1, 2, &hh) || !digits(s + i + 4, 2, &mm) || !digits(s + i + 7, 2, &ss))
        return false;
    char sign = s[i + 10];
    if ((sign != '+' && sign != '-') || !digits(s + i + 11, 2, &zh) || !digits(s + i + 13, 2, &zm))
        return false;
    if (hh > 23 || mm > 59 || ss > 60 || zm > 59)
        return false;
    int tz = (int)(zh * 60 + zm) * (sign == '-' ? -1 : 1);
    *tz_minutes = tz;
    *t = days * 86400 + (int64_t)hh * 3600 + mm * 60 + ss - (int64_t)tz * 60;
    return true;
}

void imap_datetime_format(struct buf *out, int64_t t, int tz_minutes)
{
    int64_t local = t + (int64_t)tz_minutes * 60;
    int64_t days = local >= 0 ? local / 86400 : -((-local + 86399) / 86400);
    int64_t secs = local - days * 86400;
    int64_t year = 0;
    unsigned month = 0, day = 0;
    civil_from_days(days, &year, &month, &day);
    unsigned tz = (unsigned)(tz_minutes < 0 ? -tz_minutes : tz_minutes);
    buf_printf(out, "%02u-%s-%04lld %02u:%02u:%02u %c%02u%02u", day, months[month - 1],
               (long long)year, (unsigned)(secs / 3600), (unsigned)(secs / 60 % 60),
               (unsigned)(secs % 60), tz_minutes < 0 ? '-' : '+', tz / 60 % 100, tz % 60);
}
