/*
 * format_check.c — see format_check.h.
 */
#include "format_check.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_NAME  63

typedef struct cursor {
    const char *start, *p;
    char *why;
    size_t cap;
} cursor;

static bool bad(cursor *c, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->why, c->cap, "at byte %zu: %s", (size_t)(c->p - c->start), msg);
    return false;
}

static void skip_space(cursor *c)
{
    while (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')
        c->p++;
}

/* ---- XML ------------------------------------------------------------------------------------ */

static bool xml_name(cursor *c, char *name)
{
    size_t n = 0;
    if (!isalpha((unsigned char)*c->p))
        return bad(c, "expected a name");
    while (isalnum((unsigned char)*c->p) || *c->p == '-' || *c->p == '_' || *c->p == ':') {
        if (n == MAX_NAME)
            return bad(c, "name too long");
        name[n++] = *c->p++;
    }
    name[n] = '\0';
    return true;
}

static bool xml_entity(cursor *c)
{
    static const char *const named[] = { "&amp;", "&lt;", "&gt;", "&quot;", "&apos;" };
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        if (strncmp(c->p, named[i], strlen(named[i])) == 0) {
            c->p += strlen(named[i]);
            return true;
        }
    }
    const char *q = c->p + 1;
    if (*q++ != '#')
        return bad(c, "'&' that starts no entity");
    bool hex = *q == 'x';
    q += hex;
    const char *digits = q;
    while (hex ? isxdigit((unsigned char)*q) : isdigit((unsigned char)*q))
        q++;
    if (q == digits || *q != ';')
        return bad(c, "bad character reference");
    c->p = q + 1;
    return true;
}

/* Attributes up to '>' or '/>'; *closed says which. */
static bool xml_attributes(cursor *c, bool *self_closed)
{
    for (;;) {
        skip_space(c);
        if (c->p[0] == '/' && c->p[1] == '>') {
            c->p += 2;
            *self_closed = true;
            return true;
        }
        if (*c->p == '>') {
            c->p++;
            *self_closed = false;
            return true;
        }
        char name[MAX_NAME + 1];
        if (!xml_name(c, name))
            return false;
        if (c->p[0] != '=' || c->p[1] != '"')
            return bad(c, "attribute %s: expected =\"", name);
        c->p += 2;
        while (*c->p != '"') {
            if (*c->p == '\0' || *c->p == '<')
                return bad(c, "attribute %s: unterminated value", name);
            if (*c->p != '&')
                c->p++;
            else if (!xml_entity(c))
                return false;
        }
        c->p++;
    }
}

bool mstar_test_xml_check(const char *text, const char *root, char *why, size_t cap)
{
    cursor c = { text, text, why, cap };
    char stack[MAX_DEPTH][MAX_NAME + 1];
    int depth = 0;
    bool seen_root = false;
    skip_space(&c);
    while (*c.p != '\0') {
        if (seen_root && depth == 0) {
            skip_space(&c);
            if (*c.p != '\0')
                return bad(&c, "content after the root element");
            break;
        }
        if (*c.p == '&') {
            if (!xml_entity(&c))
                return false;
            continue;
        }
        if (*c.p != '<') {
            if (depth == 0)
                return bad(&c, "text outside the root element");
            c.p++;
            continue;
        }
        c.p++;
        char name[MAX_NAME + 1];
        if (*c.p == '/') {
            c.p++;
            if (!xml_name(&c, name))
                return false;
            skip_space(&c);
            if (*c.p != '>')
                return bad(&c, "</%s: expected '>'", name);
            c.p++;
            if (depth == 0 || strcmp(stack[depth - 1], name) != 0)
                return bad(&c, "</%s> closes <%s>", name, depth ? stack[depth - 1] : "nothing");
            depth--;
            continue;
        }
        if (!xml_name(&c, name))
            return false;
        if (!seen_root && strcmp(name, root) != 0)
            return bad(&c, "root element <%s>, expected <%s>", name, root);
        seen_root = true;
        bool self_closed = false;
        if (!xml_attributes(&c, &self_closed))
            return false;
        if (self_closed)
            continue;
        if (depth == MAX_DEPTH)
            return bad(&c, "nested too deep");
        strcpy(stack[depth++], name);
    }
    if (!seen_root)
        return bad(&c, "no root element");
    if (depth != 0)
        return bad(&c, "<%s> not closed", stack[depth - 1]);
    return true;
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static bool json_value(cursor *c, int depth, size_t *numbers);

static bool json_string(cursor *c)
{
    c->p++; /* the opening quote */
    for (;;) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            return true;
        }
        if (ch == '\0' || ch < 0x20)
            return bad(c, "unterminated string or raw control character");
        if (ch != '\\') {
            c->p++;
            continue;
        }
        c->p++;
        if (*c->p == 'u') {
            for (int i = 1; i <= 4; i++)
                if (!isxdigit((unsigned char)c->p[i]))
                    return bad(c, "bad \\u escape");
            c->p += 5;
        } else if (*c->p != '\0' && strchr("\"\\/bfnrt", *c->p) != NULL) {
            c->p++;
        } else {
            return bad(c, "bad escape");
        }
    }
}

static bool json_number(cursor *c, size_t *numbers)
{
    const char *q = c->p;
    q += *q == '-';
    if (*q == '0')
        q++;
    else if (isdigit((unsigned char)*q))
        while (isdigit((unsigned char)*q))
            q++;
    else
        return bad(c, "bad number");
    if (*q == '.') {
        if (!isdigit((unsigned char)*++q))
            return bad(c, "bad fraction");
        while (isdigit((unsigned char)*q))
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        q += *q == '+' || *q == '-';
        if (!isdigit((unsigned char)*q))
            return bad(c, "bad exponent");
        while (isdigit((unsigned char)*q))
            q++;
    }
    if (!isfinite(strtod(c->p, NULL)))
        return bad(c, "number out of range for a double");
    c->p = q;
    (*numbers)++;
    return true;
}

/* Members of an object (is_object) or elements of an array, after the opening bracket. */
static bool json_members(cursor *c, bool is_object, int depth, size_t *numbers)
{
    char close = is_object ? '}' : ']';
    skip_space(c);
    if (*c->p == close) {
        c->p++;
        return true;
    }
    for (;;) {
        skip_space(c);
        if (is_object) {
            if (*c->p != '"')
                return bad(c, "expected a key");
            if (!json_string(c))
                return false;
            skip_space(c);
            if (*c->p++ != ':')
                return bad(c, "expected ':'");
        }
        if (!json_value(c, depth + 1, numbers))
            return false;
        skip_space(c);
        if (*c->p == close) {
            c->p++;
            return true;
        }
        if (*c->p++ != ',')
            return bad(c, "expected ',' or '%c'", close);
    }
}

static bool json_value(cursor *c, int depth, size_t *numbers)
{
    static const char *const words[] = { "true", "false", "null" };
    if (depth > MAX_DEPTH)
        return bad(c, "nested too deep");
    skip_space(c);
    if (*c->p == '{' || *c->p == '[') {
        bool is_object = *c->p++ == '{';
        return json_members(c, is_object, depth, numbers);
    }
    if (*c->p == '"')
        return json_string(c);
    if (*c->p == '-' || isdigit((unsigned char)*c->p))
        return json_number(c, numbers);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strncmp(c->p, words[i], strlen(words[i])) == 0) {
            c->p += strlen(words[i]);
            return true;
        }
    }
    return bad(c, "unexpected '%.8s'", c->p);
}

bool mstar_test_json_check(const char *text, size_t *numbers, char *why, size_t cap)
{
    cursor c = { text, text, why, cap };
    size_t count = 0;
    if (!json_value(&c, 0, &count))
        return false;
    skip_space(&c);
    if (*c.p != '\0')
        return bad(&c, "content after the value");
    if (numbers != NULL)
        *numbers = count;
    return true;
}
