#include "core/slice.h"

#include <ctype.h>
#include <string.h>

struct slice slice_of(const char *s)
{
    return (struct slice){.ptr = s, .len = strlen(s)};
}

static bool parse_base(struct slice s, unsigned base, uint64_t max, uint64_t *out)
{
    if (s.len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        int d = base == 16 ? hex_digit_value(s.ptr[i])
                           : (s.ptr[i] >= '0' && s.ptr[i] <= '9' ? s.ptr[i] - '0' : -1);
        if (d < 0)
            return false;
        if ((uint64_t)d > max || v > (max - (uint64_t)d) / base)
            return false;
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return true;
}

bool slice_parse_u64(struct slice s, uint64_t max, uint64_t *out)
{
    return parse_base(s, 10, max, out);
}

bool slice_parse_hex_u64(struct slice s, uint64_t max, uint64_t *out)
{
    return parse_base(s, 16, max, out);
}

bool slice_parse_i64(struct slice s, int64_t min, int64_t max, int64_t *out)
{
    bool negative = false;
    if (s.len > 0 && (s.ptr[0] == '-' || s.ptr[0] == '+')) {
        negative = s.ptr[0] == '-';
        s.ptr++;
        s.len--;
    }
    /* the magnitude bound: |min| for negatives (INT64_MIN fits in u64) */
    uint64_t limit =
        negative ? (min < 0 ? (uint64_t)(-(min + 1)) + 1 : 0) : (max > 0 ? (uint64_t)max : 0);
    uint64_t mag;
    if (!parse_base(s, 10, limit, &mag))
        return false;
    int64_t v = negative ? (mag == 0 ? 0 : -(int64_t)(mag - 1) - 1) : (int64_t)mag;
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool str_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    return slice_parse_u64(slice_of(s), max, out);
}

bool str_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    return slice_parse_i64(slice_of(s), min, max, out);
}

static bool same_char(char a, char b, bool fold_case)
{
    return fold_case ? tolower((unsigned char)a) == tolower((unsigned char)b) : a == b;
}

bool str_glob_match(const char *p, const char *s, bool fold_case)
{
    /* Iterative * backtracking: linear in practice, no recursion depth. */
    const char *star = NULL;
    const char *retry = NULL;
    while (*s != '\0') {
        if (*p == '*') {
            star = ++p;
            retry = s;
        } else if (*p == '?' || (*p != '\0' && same_char(*p, *s, fold_case))) {
            p++;
            s++;
        } else if (star != NULL) {
            p = star;
            s = ++retry;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}
