/* A scanner for one slice of a Kineto trace's `traceEvents`: JSON text in, columns out.
 *
 * `scan(text, start, end)` reads the elements `text[start:end]` (`{...}, {...}` without the
 * array's brackets) and returns, for each event in order, the fields the analyses read:
 * `ph`, `cat`, `name` and `args.name` as indices into a list of the slice's distinct strings
 * (-1: absent), `ts` and `dur` as exact integer nanoseconds (read from the decimal µs text, with
 * a flag saying whether the field was present), `pid`, `tid`, `id` and `args` `stream`,
 * `correlation`, `External id` as int64 (-1: absent) and `args` "est. achieved occupancy %" as
 * a double (NaN: absent). Other fields are skipped (their JSON is still checked).
 *
 * It returns None, and the caller decodes the slice in Python, for anything it does not handle
 * exactly as the Python path would: a value of another type than the usual one (a string pid, a
 * float id, null), a time with more than 3 decimals or an exponent, an integer beyond int64, a
 * key written with escapes, or text that is not strict JSON. It never decides that text is
 * invalid: the Python path does, with its error message.
 *
 * Limits (`scan(text, start, end, max_nesting, max_string)`): a string longer than `max_string`
 * bytes, or objects and arrays nested deeper than `max_nesting` inside an event (the event is
 * level 1), raise `LimitExceeded(kind, offset)` ("string" or "nesting", the offset in `text`).
 * `check` finds the same in any text without parsing it, and `value_end` finds where one JSON
 * value ends; both read each byte once.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MISSING (-1)
#define MAX_DEPTH 256

typedef struct {
    char *data;
    Py_ssize_t used;     /* bytes */
    Py_ssize_t capacity; /* bytes */
} Column;

enum {
    C_PH, C_CAT, C_NAME, C_ARG_NAME, /* int32 string indices */
    C_TS, C_DUR, C_PID, C_TID, C_ID, C_STREAM, C_CORRELATION, C_EXTERNAL, /* int64 */
    C_OCCUPANCY, /* double */
    C_HAS_TS, C_HAS_DUR, /* uint8 */
    N_COLUMNS
};

static const int column_size[N_COLUMNS] = {4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1, 1};

typedef struct {
    const char *text;
    Py_ssize_t pos;
    Py_ssize_t end;
    Column columns[N_COLUMNS];
    /* distinct strings: open addressing over raw spans */
    Py_ssize_t *slot_start;
    Py_ssize_t *slot_len;
    int32_t *slot_index;
    Py_ssize_t slots; /* power of two */
    Py_ssize_t distinct;
    PyObject *strings; /* list of str, by index */
    int failed;        /* 1: not handled here (return None); 2: Python error set; 3: a limit */
    int depth;         /* nesting of the value being skipped */
    Py_ssize_t max_nesting;
    Py_ssize_t max_string;
    const char *limit_kind; /* failed == 3: "string" or "nesting", at limit_at */
    Py_ssize_t limit_at;
    Py_ssize_t row_hint; /* rows to make room for at a column's first push */
} Scanner;

static PyObject *LimitExceeded;

static int over_limit(Scanner *s, const char *kind, Py_ssize_t at) {
    s->failed = 3;
    s->limit_kind = kind;
    s->limit_at = at;
    return -1;
}

/* -- output columns ---------------------------------------------------------------------- */

static int push(Scanner *s, int column, const void *value) {
    Column *c = &s->columns[column];
    int size = column_size[column];
    if (c->used + size > c->capacity) {
        Py_ssize_t capacity = c->capacity ? c->capacity * 2 : size * (s->row_hint + 16);
        char *grown = PyMem_RawRealloc(c->data, (size_t)capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            s->failed = 2;
            return -1;
        }
        c->data = grown;
        c->capacity = capacity;
    }
    memcpy(c->data + c->used, value, (size_t)size);
    c->used += size;
    return 0;
}

/* -- lexing ------------------------------------------------------------------------------ */

static inline void skip_ws(Scanner *s) {
    while (s->pos < s->end) {
        char ch = s->text[s->pos];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
            s->pos++;
        } else {
            break;
        }
    }
}

static inline int fail(Scanner *s) {
    if (!s->failed) { /* a limit or a Python error already set stays */
        s->failed = 1;
    }
    return -1;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The bytes among the 8 at p that are '"', '\\' or below 0x20, as a mask of their high bits;
 * the lowest set bit marks the first of them exactly (a borrow only ever flags bytes above a
 * flagged one). */
static inline uint64_t special8(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t quote = w ^ (ONES * '"');
    uint64_t slash = w ^ (ONES * '\\');
    uint64_t zero_quote = (quote - ONES) & ~quote;
    uint64_t zero_slash = (slash - ONES) & ~slash;
    uint64_t control = (w - ONES * 0x20) & ~w;
    return (zero_quote | zero_slash | control) & HIGHS;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
#define SKIP_PLAIN 1
#endif

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#define SKIP_SSE2 1
/* The same for 16 bytes: bit k set when byte k is '"', '\\' or below 0x20. */
static inline unsigned special16(const char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i slash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    /* unsigned v < 0x20  <=>  max(v, 0x1F) == 0x1F */
    __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, slash), control));
}
#endif

/* A string at `pos` (at its opening quote): its raw span (without quotes) and whether it has
 * escapes. Checks JSON string rules except UTF-8 (decoded later, only where read). */
static int lex_string(Scanner *s, Py_ssize_t *start, Py_ssize_t *len, int *escaped) {
    if (s->pos >= s->end || s->text[s->pos] != '"') {
        return fail(s);
    }
    Py_ssize_t i = s->pos + 1;
    *escaped = 0;
    *start = i;
    while (i < s->end) {
#ifdef SKIP_SSE2
        /* sixteen bytes at a time to the next '"', '\\' or control byte */
        if (i + 16 <= s->end) {
            unsigned found = special16(s->text + i);
            if (!found) {
                i += 16;
                continue;
            }
            i += __builtin_ctz(found);
        } else
#endif
#ifdef SKIP_PLAIN
        /* eight bytes at a time to the next '"', '\\' or control byte */
        if (i + 8 <= s->end) {
            uint64_t found = special8(s->text + i);
            if (!found) {
                i += 8;
                continue;
            }
            i += __builtin_ctzll(found) >> 3;
        }
#endif
        unsigned char ch = (unsigned char)s->text[i];
        if (ch == '"') {
            *len = i - *start;
            if (*len > s->max_string) {
                return over_limit(s, "string", *start - 1);
            }
            s->pos = i + 1;
            return 0;
        }
        if (ch == '\\') {
            *escaped = 1;
            if (i + 1 >= s->end) {
                return fail(s);
            }
            char next = s->text[i + 1];
            if (next == 'u') {
                if (i + 6 > s->end) {
                    return fail(s);
                }
                for (int k = 2; k < 6; k++) {
                    char h = s->text[i + k];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
                          (h >= 'A' && h <= 'F'))) {
                        return fail(s);
                    }
                }
                i += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", next) || next == '\0') {
                return fail(s);
            }
            i += 2;
            continue;
        }
        if (ch < 0x20) {
            return fail(s);
        }
        i++;
    }
    if (i - *start > s->max_string) {
        return over_limit(s, "string", *start - 1);
    }
    return fail(s);
}

static int hex4(const char *p) {
    int value = 0;
    for (int k = 0; k < 4; k++) {
        char h = p[k];
        value <<= 4;
        if (h >= '0' && h <= '9') {
            value |= h - '0';
        } else if (h >= 'a' && h <= 'f') {
            value |= h - 'a' + 10;
        } else {
            value |= h - 'A' + 10;
        }
    }
    return value;
}

/* The str of a raw string span (escapes resolved, UTF-8 checked); NULL and failed=1 if not. */
static PyObject *decode_string(Scanner *s, Py_ssize_t start, Py_ssize_t len, int escaped) {
    const char *raw = s->text + start;
    if (!escaped) {
        PyObject *out = PyUnicode_DecodeUTF8(raw, len, "strict");
        if (out == NULL) {
            PyErr_Clear();
            fail(s);
        }
        return out;
    }
    /* resolve escapes into UTF-8 (at most as long as the raw text) */
    char *buf = PyMem_Malloc((size_t)len + 1);
    if (buf == NULL) {
        PyErr_NoMemory();
        s->failed = 2;
        return NULL;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < len;) {
        char ch = raw[i];
        if (ch != '\\') {
            buf[n++] = ch;
            i++;
            continue;
        }
        char e = raw[i + 1];
        i += 2;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        default: { /* 'u': a code point, or a surrogate pair */
            long cp = hex4(raw + i);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= len && raw[i] == '\\' &&
                raw[i + 1] == 'u') {
                long low = hex4(raw + i + 2);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) { /* a lone surrogate: Python decides */
                PyMem_Free(buf);
                fail(s);
                return NULL;
            }
            if (cp < 0x80) {
                buf[n++] = (char)cp;
            } else if (cp < 0x800) {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xE0 | (cp >> 12));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[n++] = (char)(0xF0 | (cp >> 18));
                buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        }
    }
    PyObject *out = PyUnicode_DecodeUTF8(buf, n, "strict");
    PyMem_Free(buf);
    if (out == NULL) {
        PyErr_Clear();
        fail(s);
    }
    return out;
}

static inline uint64_t mix8(uint64_t h, const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t span_hash(const char *p, Py_ssize_t len) {
    /* over the length and up to 48 bytes from each end (names share long prefixes), eight
     * bytes at a time; spans shorter than 8 bytes byte by byte */
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)len;
    if (len < 8) {
        for (Py_ssize_t i = 0; i < len; i++) {
            h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
        }
        return h ^ (h >> 29);
    }
    Py_ssize_t head = len < 48 ? len : 48;
    for (Py_ssize_t i = 0; i + 8 <= head; i += 8) {
        h = mix8(h, p + i);
    }
    h = mix8(h, p + head - 8); /* the head's last 8 bytes (overlapping when head % 8) */
    if (len > 48) {
        Py_ssize_t tail = len - 48 > 48 ? len - 48 : 48; /* the tail's start, past the head */
        for (Py_ssize_t i = tail; i + 8 <= len; i += 8) {
            h = mix8(h, p + i);
        }
        h = mix8(h, p + len - 8);
    }
    return h;
}

static int grow_slots(Scanner *s) {
    Py_ssize_t slots = s->slots ? s->slots * 2 : 1024;
    Py_ssize_t *starts = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)slots);
    Py_ssize_t *lens = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)slots);
    int32_t *indices = PyMem_Malloc(sizeof(int32_t) * (size_t)slots);
    if (!starts || !lens || !indices) {
        PyMem_Free(starts);
        PyMem_Free(lens);
        PyMem_Free(indices);
        PyErr_NoMemory();
        s->failed = 2;
        return -1;
    }
    for (Py_ssize_t i = 0; i < slots; i++) {
        indices[i] = -1;
    }
    for (Py_ssize_t i = 0; i < s->slots; i++) {
        if (s->slot_index[i] < 0) {
            continue;
        }
        uint64_t h = span_hash(s->text + s->slot_start[i], s->slot_len[i]);
        Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(slots - 1));
        while (indices[j] >= 0) {
            j = (j + 1) & (slots - 1);
        }
        starts[j] = s->slot_start[i];
        lens[j] = s->slot_len[i];
        indices[j] = s->slot_index[i];
    }
    PyMem_Free(s->slot_start);
    PyMem_Free(s->slot_len);
    PyMem_Free(s->slot_index);
    s->slot_start = starts;
    s->slot_len = lens;
    s->slot_index = indices;
    s->slots = slots;
    return 0;
}

/* The index of the string at `pos` in the slice's distinct strings (added if new). */
static int32_t read_string(Scanner *s) {
    Py_ssize_t start, len;
    int escaped;
    if (lex_string(s, &start, &len, &escaped) < 0) {
        return -1;
    }
    if (s->distinct * 2 >= s->slots && grow_slots(s) < 0) {
        return -1;
    }
    const char *p = s->text + start;
    uint64_t h = span_hash(p, len);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(s->slots - 1));
    while (s->slot_index[j] >= 0) {
        if (s->slot_len[j] == len && memcmp(s->text + s->slot_start[j], p, (size_t)len) == 0) {
            return s->slot_index[j];
        }
        j = (j + 1) & (s->slots - 1);
    }
    PyObject *str = decode_string(s, start, len, escaped);
    if (str == NULL) {
        return -1;
    }
    int rc = PyList_Append(s->strings, str);
    Py_DECREF(str);
    if (rc < 0) {
        s->failed = 2;
        return -1;
    }
    s->slot_start[j] = start;
    s->slot_len[j] = len;
    s->slot_index[j] = (int32_t)s->distinct;
    return (int32_t)s->distinct++;
}

/* A JSON number at `pos`: its span, checked against the JSON grammar. */
static int lex_number(Scanner *s, Py_ssize_t *start, Py_ssize_t *int_digits,
                      Py_ssize_t *frac_start, Py_ssize_t *frac_digits, int *exponent) {
    Py_ssize_t i = s->pos;
    *start = i;
    if (i < s->end && s->text[i] == '-') {
        i++;
    }
    Py_ssize_t digits_start = i;
    while (i < s->end && s->text[i] >= '0' && s->text[i] <= '9') {
        i++;
    }
    *int_digits = i - digits_start;
    if (*int_digits == 0 || (*int_digits > 1 && s->text[digits_start] == '0')) {
        return fail(s); /* no digits, or a leading zero */
    }
    *frac_start = i;
    *frac_digits = 0;
    if (i < s->end && s->text[i] == '.') {
        i++;
        *frac_start = i;
        while (i < s->end && s->text[i] >= '0' && s->text[i] <= '9') {
            i++;
        }
        *frac_digits = i - *frac_start;
        if (*frac_digits == 0) {
            return fail(s);
        }
    }
    *exponent = 0;
    if (i < s->end && (s->text[i] == 'e' || s->text[i] == 'E')) {
        *exponent = 1;
        i++;
        if (i < s->end && (s->text[i] == '+' || s->text[i] == '-')) {
            i++;
        }
        Py_ssize_t e_start = i;
        while (i < s->end && s->text[i] >= '0' && s->text[i] <= '9') {
            i++;
        }
        if (i == e_start) {
            return fail(s);
        }
    }
    s->pos = i;
    return 0;
}

/* An integer value (a JSON int within int64). */
static int read_int(Scanner *s, int64_t *out) {
    Py_ssize_t start, int_digits, frac_start, frac_digits;
    int exponent;
    if (s->pos >= s->end || !(s->text[s->pos] == '-' ||
                               (s->text[s->pos] >= '0' && s->text[s->pos] <= '9'))) {
        return fail(s); /* a string, null, ...: the Python path's per-value rules */
    }
    if (lex_number(s, &start, &int_digits, &frac_start, &frac_digits, &exponent) < 0) {
        return -1;
    }
    if (frac_digits || exponent || int_digits > 18) {
        return fail(s);
    }
    int negative = s->text[start] == '-';
    int64_t value = 0;
    for (Py_ssize_t i = start + negative; i < start + negative + int_digits; i++) {
        value = value * 10 + (s->text[i] - '0');
    }
    *out = negative ? -value : value;
    return 0;
}

/* A time in µs (a JSON int, or a decimal with at most 3 decimals) as exact integer ns. */
static int read_time_ns(Scanner *s, int64_t *out) {
    Py_ssize_t start, int_digits, frac_start, frac_digits;
    int exponent;
    if (s->pos >= s->end || !(s->text[s->pos] == '-' ||
                               (s->text[s->pos] >= '0' && s->text[s->pos] <= '9'))) {
        return fail(s);
    }
    if (lex_number(s, &start, &int_digits, &frac_start, &frac_digits, &exponent) < 0) {
        return -1;
    }
    if (exponent || frac_digits > 3 || int_digits > 16) {
        return fail(s); /* rounding or a wider range: the Python path */
    }
    int negative = s->text[start] == '-';
    uint64_t value = 0;
    for (Py_ssize_t i = start + negative; i < start + negative + int_digits; i++) {
        value = value * 10 + (uint64_t)(s->text[i] - '0');
    }
    if (value > (uint64_t)(INT64_MAX / 1000 - 1)) {
        return fail(s); /* ns beyond int64 */
    }
    uint64_t frac = 0;
    for (Py_ssize_t k = 0; k < 3; k++) {
        frac = frac * 10 + (uint64_t)(k < frac_digits ? s->text[frac_start + k] - '0' : 0);
    }
    int64_t ns = (int64_t)(value * 1000 + frac);
    *out = negative ? -ns : ns;
    return 0;
}

/* A float value (a JSON number) read as Python's float() reads its text. */
static int read_double(Scanner *s, double *out) {
    Py_ssize_t start, int_digits, frac_start, frac_digits;
    int exponent;
    if (s->pos >= s->end || !(s->text[s->pos] == '-' ||
                               (s->text[s->pos] >= '0' && s->text[s->pos] <= '9'))) {
        return fail(s);
    }
    if (lex_number(s, &start, &int_digits, &frac_start, &frac_digits, &exponent) < 0) {
        return -1;
    }
    Py_ssize_t len = s->pos - start;
    char buf[64];
    if (len >= (Py_ssize_t)sizeof(buf)) {
        return fail(s);
    }
    memcpy(buf, s->text + start, (size_t)len);
    buf[len] = '\0';
    double value = PyOS_string_to_double(buf, NULL, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return fail(s);
    }
    *out = value;
    return 0;
}

static int skip_value(Scanner *s);
static int skip_nested(Scanner *s);

static int expect_literal(Scanner *s, const char *word) {
    size_t n = strlen(word);
    if (s->pos + (Py_ssize_t)n > s->end || memcmp(s->text + s->pos, word, n) != 0) {
        return fail(s);
    }
    s->pos += (Py_ssize_t)n;
    return 0;
}

/* After an opening `open`: 1 if members follow, 0 if `close` ends it at once. */
static int open_container(Scanner *s, char open, char close) {
    skip_ws(s);
    if (s->pos >= s->end || s->text[s->pos] != open) {
        return fail(s);
    }
    s->pos++;
    skip_ws(s);
    if (s->pos < s->end && s->text[s->pos] == close) {
        s->pos++;
        return 0;
    }
    return 1;
}

/* After a member or element: 1 if a comma (another one) follows, 0 if `close` ends it. */
static int next_or_close(Scanner *s, char close) {
    skip_ws(s);
    if (s->pos >= s->end) {
        return fail(s);
    }
    if (s->text[s->pos] == ',') {
        s->pos++;
        return 1;
    }
    if (s->text[s->pos] == close) {
        s->pos++;
        return 0;
    }
    return fail(s);
}

/* A member's key (a string, its span and whether it has escapes) and the colon after it. */
static int read_key(Scanner *s, Py_ssize_t *start, Py_ssize_t *len, int *escaped) {
    skip_ws(s);
    if (lex_string(s, start, len, escaped) < 0) {
        return -1;
    }
    skip_ws(s);
    if (s->pos >= s->end || s->text[s->pos] != ':') {
        return fail(s);
    }
    s->pos++;
    return 0;
}

/* Skip any JSON value, checking its grammar; nesting deeper than MAX_DEPTH is left to Python
 * (the C stack stays bounded whatever the text). */
static int skip_value(Scanner *s) {
    if (++s->depth > MAX_DEPTH) {
        return fail(s);
    }
    int rc = skip_nested(s);
    s->depth--;
    return rc;
}

static int skip_nested(Scanner *s) {
    skip_ws(s);
    if (s->pos >= s->end) {
        return fail(s);
    }
    char ch = s->text[s->pos];
    Py_ssize_t start, len, a, b, c;
    int escaped, e, more;
    if ((ch == '{' || ch == '[') && s->depth + 1 > s->max_nesting) {
        return over_limit(s, "nesting", s->pos);
    }
    switch (ch) {
    case '"':
        return lex_string(s, &start, &len, &escaped);
    case '{':
        for (more = open_container(s, '{', '}'); more > 0; more = next_or_close(s, '}')) {
            if (read_key(s, &start, &len, &escaped) < 0 || skip_value(s) < 0) {
                return -1;
            }
        }
        return more;
    case '[':
        for (more = open_container(s, '[', ']'); more > 0; more = next_or_close(s, ']')) {
            if (skip_value(s) < 0) {
                return -1;
            }
        }
        return more;
    case 't':
        return expect_literal(s, "true");
    case 'f':
        return expect_literal(s, "false");
    case 'n':
        return expect_literal(s, "null");
    default:
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            return lex_number(s, &start, &a, &b, &c, &e);
        }
        return fail(s);
    }
}

/* -- one event ----------------------------------------------------------------------------- */

typedef struct {
    int32_t ph, cat, name, arg_name;
    int64_t ts, dur, pid, tid, id, stream, correlation, external;
    double occupancy;
    uint8_t has_ts, has_dur;
} Event;

static inline int key_is(Scanner *s, Py_ssize_t start, Py_ssize_t len, const char *word) {
    size_t n = strlen(word);
    return (size_t)len == n && memcmp(s->text + start, word, n) == 0;
}

/* Read an object's members, calling `member` on each key; a key with escapes is not handled. */
typedef int (*MemberFn)(Scanner *, Event *, Py_ssize_t, Py_ssize_t);

static int read_object(Scanner *s, Event *ev, MemberFn member) {
    int more; /* a value that is not an object (null args, a number...): the Python path */
    for (more = open_container(s, '{', '}'); more > 0; more = next_or_close(s, '}')) {
        Py_ssize_t start, len;
        int escaped;
        if (read_key(s, &start, &len, &escaped) < 0) {
            return -1;
        }
        if (escaped) {
            return fail(s);
        }
        skip_ws(s);
        if (member(s, ev, start, len) < 0) {
            return -1;
        }
    }
    return more;
}

static int string_value(Scanner *s, int32_t *out) {
    if (s->pos >= s->end || s->text[s->pos] != '"') {
        return fail(s);
    }
    int32_t index = read_string(s);
    if (index < 0) {
        return -1;
    }
    *out = index;
    return 0;
}

static int args_member(Scanner *s, Event *ev, Py_ssize_t k, Py_ssize_t n) {
    if (key_is(s, k, n, "name")) {
        return string_value(s, &ev->arg_name);
    }
    if (key_is(s, k, n, "stream")) {
        return read_int(s, &ev->stream);
    }
    if (key_is(s, k, n, "correlation")) {
        return read_int(s, &ev->correlation);
    }
    if (key_is(s, k, n, "External id")) {
        return read_int(s, &ev->external);
    }
    if (key_is(s, k, n, "est. achieved occupancy %")) {
        return read_double(s, &ev->occupancy);
    }
    return skip_value(s);
}

static int event_member(Scanner *s, Event *ev, Py_ssize_t k, Py_ssize_t n) {
    switch (n) {
    case 2:
        if (key_is(s, k, n, "ph")) {
            return string_value(s, &ev->ph);
        }
        if (key_is(s, k, n, "ts")) {
            ev->has_ts = 1;
            return read_time_ns(s, &ev->ts);
        }
        if (key_is(s, k, n, "id")) {
            return read_int(s, &ev->id);
        }
        break;
    case 3:
        if (key_is(s, k, n, "cat")) {
            return string_value(s, &ev->cat);
        }
        if (key_is(s, k, n, "dur")) {
            ev->has_dur = 1;
            return read_time_ns(s, &ev->dur);
        }
        if (key_is(s, k, n, "pid")) {
            return read_int(s, &ev->pid);
        }
        if (key_is(s, k, n, "tid")) {
            return read_int(s, &ev->tid);
        }
        break;
    case 4:
        if (key_is(s, k, n, "name")) {
            return string_value(s, &ev->name);
        }
        if (key_is(s, k, n, "args")) {
            /* a repeated `args` replaces the earlier one, as in a dict */
            ev->arg_name = -1;
            ev->stream = ev->correlation = ev->external = MISSING;
            ev->occupancy = Py_NAN;
            s->depth++; /* `args` is level 2: its values' containers level 3 and deeper */
            int rc = read_object(s, ev, args_member);
            s->depth--;
            return rc;
        }
        break;
    }
    return skip_value(s);
}

static int read_event(Scanner *s) {
    Event ev = {-1, -1, -1, -1, 0, 0, MISSING, MISSING, MISSING, MISSING, MISSING, MISSING,
                Py_NAN, 0, 0};
    if (read_object(s, &ev, event_member) < 0) {
        return -1;
    }
    if (push(s, C_PH, &ev.ph) || push(s, C_CAT, &ev.cat) || push(s, C_NAME, &ev.name) ||
        push(s, C_ARG_NAME, &ev.arg_name) || push(s, C_TS, &ev.ts) ||
        push(s, C_DUR, &ev.dur) || push(s, C_PID, &ev.pid) || push(s, C_TID, &ev.tid) ||
        push(s, C_ID, &ev.id) || push(s, C_STREAM, &ev.stream) ||
        push(s, C_CORRELATION, &ev.correlation) || push(s, C_EXTERNAL, &ev.external) ||
        push(s, C_OCCUPANCY, &ev.occupancy) || push(s, C_HAS_TS, &ev.has_ts) ||
        push(s, C_HAS_DUR, &ev.has_dur)) {
        return -1;
    }
    return 0;
}

/* -- the module ------------------------------------------------------------------------------ */

static void release(Scanner *s) {
    for (int i = 0; i < N_COLUMNS; i++) {
        PyMem_RawFree(s->columns[i].data);
    }
    PyMem_Free(s->slot_start);
    PyMem_Free(s->slot_len);
    PyMem_Free(s->slot_index);
    Py_XDECREF(s->strings);
}

static PyObject *limit_error(const char *kind, Py_ssize_t at) {
    PyObject *value = Py_BuildValue("(sn)", kind, at);
    if (value != NULL) {
        PyErr_SetObject(LimitExceeded, value);
        Py_DECREF(value);
    }
    return NULL;
}

/* The arguments (text, start, end[, max_nesting, max_string]) into `view` and `s`. */
static int parse_args(const char *usage, PyObject *const *args, Py_ssize_t nargs,
                      Py_buffer *view, Scanner *s, Py_ssize_t *start, Py_ssize_t *end) {
    if (nargs != 3 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    memset(s, 0, sizeof(*s));
    *start = PyLong_AsSsize_t(args[1]);
    *end = PyLong_AsSsize_t(args[2]);
    s->max_nesting = nargs == 5 ? PyLong_AsSsize_t(args[3]) : PY_SSIZE_T_MAX;
    s->max_string = nargs == 5 ? PyLong_AsSsize_t(args[4]) : PY_SSIZE_T_MAX;
    if (PyErr_Occurred()) {
        PyBuffer_Release(view);
        return -1;
    }
    if (*start < 0 || *end > view->len || *start > *end) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "start/end outside the text");
        return -1;
    }
    s->text = (const char *)view->buf;
    s->pos = *start;
    s->end = *end;
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Scanner s;
    Py_ssize_t start, end;
    if (parse_args("scan(text, start, end[, max_nesting, max_string])", args, nargs, &view, &s,
                   &start, &end) < 0) {
        return NULL;
    }
    /* room for one event per 64 bytes at once (events are rarely shorter): few or no reallocs */
    s.row_hint = (end - start) / 64;
    s.strings = PyList_New(0);
    PyObject *result = NULL;
    Py_ssize_t count = 0;
    if (s.strings == NULL) {
        goto done;
    }
    skip_ws(&s);
    while (s.pos < s.end) {
        if (read_event(&s) < 0) {
            break;
        }
        count++;
        skip_ws(&s);
        if (s.pos >= s.end) {
            break;
        }
        if (s.text[s.pos] != ',') {
            fail(&s);
            break;
        }
        s.pos++;
        skip_ws(&s);
        if (s.pos >= s.end) { /* a trailing comma */
            fail(&s);
            break;
        }
    }
    if (s.failed == 2) {
        goto done;
    }
    if (s.failed == 3) {
        limit_error(s.limit_kind, s.limit_at);
        goto done;
    }
    if (s.failed) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyTuple_New(N_COLUMNS + 2);
    if (result == NULL) {
        goto done;
    }
    PyObject *n = PyLong_FromSsize_t(count);
    if (n == NULL) {
        Py_CLEAR(result);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, n);
    PyTuple_SET_ITEM(result, 1, Py_NewRef(s.strings));
    for (int i = 0; i < N_COLUMNS; i++) {
        PyObject *bytes = PyBytes_FromStringAndSize(s.columns[i].data, s.columns[i].used);
        if (bytes == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i + 2, bytes);
    }
done:
    release(&s);
    PyBuffer_Release(&view);
    return result;
}

/* The limits over text[start:end] without parsing it: strings longer than max_string bytes,
 * objects and arrays nested deeper than max_nesting (counted from `start`). Only the quotes,
 * backslashes and brackets are looked at, so any text is checked, JSON or not. */
static PyObject *check(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Scanner s;
    Py_ssize_t start, end;
    if (parse_args("check(text, start, end, max_nesting, max_string)", args, nargs, &view, &s,
                   &start, &end) < 0) {
        return NULL;
    }
    const char *t = s.text;
    Py_ssize_t depth = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        char ch = t[i];
        if (ch == '"') {
            Py_ssize_t open = i;
            for (i++; i < end && t[i] != '"'; i++) {
                if (t[i] == '\\') {
                    i++;
                }
            }
            if ((i < end ? i : end) - open - 1 > s.max_string) {
                PyBuffer_Release(&view);
                return limit_error("string", open);
            }
        } else if (ch == '{' || ch == '[') {
            if (++depth > s.max_nesting) {
                PyBuffer_Release(&view);
                return limit_error("nesting", i);
            }
        } else if ((ch == '}' || ch == ']') && depth > 0) {
            depth--;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* Where the JSON value at t[start] ends (the offset after it): -1 when it does not end before
 * `end`, -2 with LimitExceeded set. Strings and brackets are matched, not parsed. */
static Py_ssize_t find_value_end(const char *t, Py_ssize_t start, Py_ssize_t end,
                                 Py_ssize_t max_nesting, Py_ssize_t max_string) {
    Py_ssize_t depth = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        char ch = t[i];
        if (ch == '"') {
            Py_ssize_t open = i;
            for (i++; i < end && t[i] != '"'; i++) {
                if (t[i] == '\\') {
                    i++;
                }
            }
            if ((i < end ? i : end) - open - 1 > max_string) {
                limit_error("string", open);
                return -2;
            }
            if (i < end && depth == 0) {
                return i + 1;
            }
        } else if (ch == '{' || ch == '[') {
            if (++depth > max_nesting) {
                limit_error("nesting", i);
                return -2;
            }
        } else if (ch == '}' || ch == ']') {
            if (depth == 0) { /* a scalar's end (or stray text: the caller's parse decides) */
                return i;
            }
            if (--depth == 0) {
                return i + 1;
            }
        } else if (depth == 0 && (ch == ',' || ch == ' ' || ch == '\n' || ch == '\r' ||
                                  ch == '\t')) {
            return i; /* the end of a number or literal */
        }
    }
    return -1;
}

/* Where the JSON value at text[start] ends (the offset after it), or -1 when it does not end
 * before `end`. Raises LimitExceeded as `check` does (nesting counted from the value). */
static PyObject *value_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Scanner s;
    Py_ssize_t start, end;
    if (parse_args("value_end(text, start, end, max_nesting, max_string)", args, nargs, &view,
                   &s, &start, &end) < 0) {
        return NULL;
    }
    Py_ssize_t found = find_value_end(s.text, start, end, s.max_nesting, s.max_string);
    PyBuffer_Release(&view);
    if (found == -2) {
        return NULL;
    }
    return PyLong_FromSsize_t(found);
}

static inline Py_ssize_t after_space(const char *t, Py_ssize_t i, Py_ssize_t end) {
    while (i < end && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) {
        i++;
    }
    return i;
}

/* Walk the members of a JSON object from text[start] (just after its `{`, or after a member),
 * looking for the key "traceEvents". Returns (status, offset, keys): status 1, the offset of
 * the "traceEvents" key's value; 2, the offset after the object's `}`; 0, the text ends first
 * (offset: the member to start again from, with more text); -1, not JSON there. `keys`: the
 * raw keys passed (at most 8, as bytes, without quotes). Raises LimitExceeded in a value. */
static PyObject *members(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Scanner s;
    Py_ssize_t start, end;
    if (parse_args("members(text, start, end, max_nesting, max_string)", args, nargs, &view,
                   &s, &start, &end) < 0) {
        return NULL;
    }
    const char *t = s.text;
    PyObject *keys = PyList_New(0);
    if (keys == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int status = 0;
    Py_ssize_t member = start, at = start, i = start;
    for (;;) {
        i = after_space(t, i, end);
        if (i >= end) {
            at = member;
            break;
        }
        if (t[i] == ',') {
            member = ++i;
            continue;
        }
        if (t[i] == '}') {
            status = 2;
            at = i + 1;
            break;
        }
        if (t[i] != '"') {
            status = -1;
            at = i;
            break;
        }
        Py_ssize_t key_end = find_value_end(t, i, end, s.max_nesting, s.max_string);
        if (key_end == -2) {
            goto error;
        }
        if (key_end < 0) {
            at = member;
            break;
        }
        Py_ssize_t key = i + 1, key_len = key_end - i - 2;
        i = after_space(t, key_end, end);
        if (i >= end) {
            at = member;
            break;
        }
        if (t[i] != ':') {
            status = -1;
            at = i;
            break;
        }
        i = after_space(t, i + 1, end);
        if (i >= end) {
            at = member;
            break;
        }
        if (key_len == 11 && memcmp(t + key, "traceEvents", 11) == 0) {
            status = 1;
            at = i;
            break;
        }
        Py_ssize_t value_end = find_value_end(t, i, end, s.max_nesting - 1, s.max_string);
        if (value_end == -2) {
            goto error;
        }
        if (value_end < 0) {
            at = member;
            break;
        }
        if (PyList_GET_SIZE(keys) < 8) {
            PyObject *raw = PyBytes_FromStringAndSize(t + key, key_len);
            if (raw == NULL || PyList_Append(keys, raw) < 0) {
                Py_XDECREF(raw);
                goto error;
            }
            Py_DECREF(raw);
        }
        i = member = value_end;
    }
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(inN)", status, at, keys);
    return result;
error:
    Py_DECREF(keys);
    PyBuffer_Release(&view);
    return NULL;
}

/* The first offset in text[start:end] that is not JSON whitespace (`end` if none). */
static PyObject *non_space(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Scanner s;
    Py_ssize_t start, end;
    if (parse_args("non_space(text, start, end)", args, nargs, &view, &s, &start, &end) < 0) {
        return NULL;
    }
    const unsigned char *t = (const unsigned char *)s.text;
    Py_ssize_t i = start;
    while (i < end && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) {
        i++;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(i);
}

/* The distinct values of an int32 buffer of string indices (-1: absent, else below
 * n_strings), in the order they first appear: one pass, no sort. */
static PyObject *first_seen(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "first_seen(codes, n_strings)");
        return NULL;
    }
    Py_ssize_t n_strings = PyLong_AsSsize_t(args[1]);
    if (n_strings < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "n_strings must not be negative");
        }
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const int32_t *codes = (const int32_t *)view.buf;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(int32_t);
    char *seen = PyMem_Calloc((size_t)n_strings + 1, 1);
    PyObject *out = PyList_New(0);
    if (seen == NULL || out == NULL) {
        PyMem_Free(seen);
        Py_XDECREF(out);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t code = codes[i];
        if (code < -1 || code >= n_strings) {
            PyErr_SetString(PyExc_ValueError, "a string index outside the table");
            Py_CLEAR(out);
            break;
        }
        if (seen[code + 1]) {
            continue;
        }
        seen[code + 1] = 1;
        PyObject *value = PyLong_FromLong(code);
        if (value == NULL || PyList_Append(out, value) < 0) {
            Py_XDECREF(value);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(value);
    }
    PyMem_Free(seen);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"non_space", (PyCFunction)(void (*)(void))non_space, METH_FASTCALL,
     "non_space(text, start, end) -> the first offset that is not whitespace (end if none)."},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(text, start, end[, max_nesting, max_string]) -> (count, strings, *columns) or None "
     "(see the module source)."},
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL,
     "check(text, start, end, max_nesting, max_string) -> None; raises LimitExceeded."},
    {"members", (PyCFunction)(void (*)(void))members, METH_FASTCALL,
     "members(text, start, end, max_nesting, max_string) -> (status, offset, keys): see the "
     "source."},
    {"first_seen", (PyCFunction)(void (*)(void))first_seen, METH_FASTCALL,
     "first_seen(codes, n_strings) -> the distinct int32 codes in order of first appearance."},
    {"value_end", (PyCFunction)(void (*)(void))value_end, METH_FASTCALL,
     "value_end(text, start, end, max_nesting, max_string) -> offset after the value, or -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_scan", "Kineto traceEvents slice scanner (see _scan.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    LimitExceeded = PyErr_NewException("gpulens.analyze.traces._scan.LimitExceeded",
                                       PyExc_ValueError, NULL);
    if (LimitExceeded == NULL || PyModule_AddObjectRef(module, "LimitExceeded", LimitExceeded) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
