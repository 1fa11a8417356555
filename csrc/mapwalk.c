/*
 * Stream /proc/self/maps or /proc/self/smaps with raw system calls: no
 * malloc, no stdio, no errno (see mapwalk.h for who calls it and when).
 *
 * An entry starts with its header line ("lo-hi perms offset dev inode path");
 * smaps adds lines of its own, VmFlags last. So an entry is whole when the
 * next header (or the end of the file) arrives, for either file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>

#include "arch.h"
#include "mapwalk.h"

static char text[1 << 16];
static struct rs_vma current;

static unsigned long hex(const char **s, const char *end)
{
    unsigned long v = 0;
    for (; *s < end; (*s)++) {
        char c = **s;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            break;
        v = v * 16 + (unsigned long)d;
    }
    return v;
}

static void read_header(struct rs_vma *m, const char *s, const char *end)
{
    m->lo = hex(&s, end);
    s++;  /* '-' */
    m->hi = hex(&s, end);
    s++;  /* ' ' */
    for (int i = 0; i < 4; i++)
        m->perms[i] = s + i < end ? s[i] : '-';
    m->perms[4] = 0;
    for (int field = 0; s < end && field < 4; field++) {  /* perms, offset, dev, inode */
        while (s < end && *s == ' ')
            s++;
        while (s < end && *s != ' ')
            s++;
    }
    while (s < end && *s == ' ')
        s++;
    unsigned long n = 0;
    while (s < end && n < sizeof m->path - 1)
        m->path[n++] = *s++;
    m->path[n] = 0;
    m->dc = m->io = m->pf = 0;
}

static int has_flag(const char *line, const char *end, char a, char b)
{
    for (const char *s = line + 8; s + 1 < end; s++)  /* past "VmFlags:" */
        if (s[-1] == ' ' && s[0] == a && s[1] == b && (s + 2 == end || s[2] == ' '))
            return 1;
    return 0;
}

static int is_header(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

long rs_map_walk(const char *file, long (*fn)(const struct rs_vma *, void *), void *ctx)
{
    long fd = rs_sys4(SYS_openat, AT_FDCWD, (long)file, O_RDONLY | O_CLOEXEC, 0);
    long have = 0, rc = 0, n;
    int pending = 0;  /* `current` holds an entry not yet handed to fn */
    if (fd < 0)
        return fd;
    for (;;) {
        do
            n = rs_sys3(SYS_read, fd, (long)(text + have), (long)(sizeof text - have));
        while (n == -EINTR);
        if (n < 0) {
            rc = n;
            break;
        }
        have += n;
        long start = 0;
        for (long i = 0; i < have && rc == 0; i++) {
            if (text[i] != '\n')
                continue;
            const char *line = text + start, *end = text + i;
            if (end > line && is_header(line[0])) {
                if (pending)
                    rc = fn(&current, ctx);
                read_header(&current, line, end);
                pending = 1;
            } else if (end - line > 8 && line[0] == 'V' && line[1] == 'm' && line[2] == 'F') {
                current.dc = has_flag(line, end, 'd', 'c');
                current.io = has_flag(line, end, 'i', 'o');
                current.pf = has_flag(line, end, 'p', 'f');
            }
            start = i + 1;
        }
        if (rc != 0)
            break;
        if (start == 0 && have == (long)sizeof text)
            start = have;  /* a line longer than the buffer: no header line is */
        for (long i = start; i < have; i++)
            text[i - start] = text[i];
        have -= start;
        if (n == 0) {
            if (pending)
                rc = fn(&current, ctx);
            break;
        }
    }
    rs_sys1(SYS_close, fd);
    return rc;
}
