/* RFC 5322 date-time parsing (see message-date.h). */
#include "storage/message/message-date.h"

#include <string.h>
#include <strings.h>

struct cursor {
    const char *s;
    size_t len;
    size_t i;
};

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Blanks, line ends and (nested) comments. */
static void skip_cfws(struct cursor *c)
{
    while (c->i < c->len) {
        char ch = c->s[c->i];
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            c->i++;
        } else if (ch == '(') {
            unsigned depth = 0;
            while (c->i < c->len) {
                ch = c->s[c->i++];
                if (ch == '\\' && c->i < c->len)
                    c->i++;
                else if (ch == '(')
                    depth++;
                else if (ch == ')' && --depth == 0)
                    break;
            }
        } else {
            return;
        }
    }
}

static size_t read_alpha(struct cursor *c, const char **word)
{
    skip_cfws(c);
    *word = c->s + c->i;
    size_t start = c->i;
    while (c->i < c->len && is_alpha(c->s[c->i]))
        c->i++;
    return c->i - start;
}

/* Up to `max` digits; returns how many were read. */
static size_t read_number(struct cursor *c, size_t max, int *value)
{
    skip_cfws(c);
    size_t n = 0;
    *value = 0;
    while (c->i < c->len && is_digit(c->s[c->i]) && n < max) {
        *value = *value * 10 + (c->s[c->i++] - '0');
        n++;
    }
    return n;
}

static bool take(struct cursor *c, char ch)
{
    skip_cfws(c);
    if (c->i < c->len && c->s[c->i] == ch) {
        c->i++;
        return true;
    }
    return false;
}

static int month_of(const char *word, size_t len)
{
    static const char *const names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                        "jul", "aug", "sep", "oct", "nov", "dec"};
    if (len < 3)
        return 0;
    for (int m = 0; m < 12; m++) {
        if (strncasecmp(word, names[m], 3) == 0)
            return m + 1;
    }
    return 0;
}

/* Zone names of RFC 5322 4.3; false for an unknown name. */
static bool zone_of(const char *word, size_t len, int *minutes)
{
    static const struct {
        const char *name;
        int hours;
    } zones[] = {{"UT", 0},   {"GMT", 0},  {"UTC", 0},  {"Z", 0},    {"EST", -5}, {"EDT", -4},
                 {"CST", -6}, {"CDT", -5}, {"MST", -7}, {"MDT", -6}, {"PST", -8}, {"PDT", -7}};
    for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
        if (strlen(zones[i].name) == len && strncasecmp(word, zones[i].name, len) == 0) {
            *minutes = zones[i].hours * 60;
            return true;
        }
    }
    if (len == 1 && word[0] != 'j' && word[0] != 'J') {
        *minutes = 0; /* military zones: RFC 5322 says treat as unknown (+0000) */
        return true;
    }
    return false;
}

int64_t message_date_days_from_civil(int64_t year, unsigned month, unsigned day)
{
    /* Howard Hinnant's days_from_civil. */
    year -= month <= 2;
    int64_t era = (year >= 0 ? year : year - 399) / 400;
    int64_t yoe = year - era * 400;
    int64_t mp = (int64_t)(month > 2 ? month - 3 : month + 9);
    int64_t doy = (153 * mp + 2) / 5 + (int64_t)day - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool is_leap(int year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

bool message_date_parse(const char *s, size_t len, int64_t *epoch, int *zone_minutes)
{
    struct cursor c = {s, len, 0};
    const char *word;
    size_t wlen;
    /* Optional day of week, with or without its comma. */
    size_t save = c.i;
    wlen = read_alpha(&c, &word);
    if (wlen > 0)
        take(&c, ',');
    else
        c.i = save;
    int day, year, hour, minute, second = 0;
    if (read_number(&c, 2, &day) == 0)
        return false;
    take(&c, '-'); /* "21-Nov-1997" appears in the wild */
    wlen = read_alpha(&c, &word);
    int month = month_of(word, wlen);
    if (month == 0)
        return false;
    take(&c, '-');
    size_t ydigits = read_number(&c, 4, &year);
    if (ydigits < 2)
        return false;
    if (ydigits == 2)
        year += year < 50 ? 2000 : 1900;
    else if (ydigits == 3)
        year += 1900;
    if (read_number(&c, 2, &hour) == 0 || !take(&c, ':') || read_number(&c, 2, &minute) == 0)
        return false;
    if (take(&c, ':') && read_number(&c, 2, &second) == 0)
        return false;
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int max_day = month_days[month - 1] + (month == 2 && is_leap(year));
    if (year < 1900 || day < 1 || day > max_day || hour > 23 || minute > 59 || second > 60)
        return false;
    int zone = 0;
    skip_cfws(&c);
    if (c.i < c.len && (c.s[c.i] == '+' || c.s[c.i] == '-')) {
        int sign = c.s[c.i++] == '-' ? -1 : 1;
        int hhmm;
        size_t start = c.i;
        while (c.i < c.len && c.i - start < 4 && is_digit(c.s[c.i]))
            c.i++;
        if (c.i - start != 4)
            return false;
        hhmm = (c.s[start] - '0') * 1000 + (c.s[start + 1] - '0') * 100 +
               (c.s[start + 2] - '0') * 10 + (c.s[start + 3] - '0');
        if (hhmm % 100 > 59 || hhmm / 100 > 23)
            return false;
        zone = sign * (hhmm / 100 * 60 + hhmm % 100);
    } else {
        wlen = read_alpha(&c, &word);
        if (wlen > 0 && !zone_of(word, wlen, &zone))
            zone = 0; /* an unknown name: RFC 5322 says read it as -0000 */
    }
    int64_t days = message_date_days_from_civil(year, (unsigned)month, (unsigned)day);
    *epoch = days * 86400 + hour * 3600 + minute * 60 + second - (int64_t)zone * 60;
    *zone_minutes = zone;
    return true;
}
