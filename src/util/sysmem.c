/* sysmem — memory facts of the machine and the process, read from /proc and /sys/fs/cgroup.
 *
 * Invariant: nothing here allocates more than a fixed-size stack buffer, and every reader degrades to 0
 * ("unknown" / "no limit") instead of failing when a file is missing — containers hide many of them.
 * The cgroup limit is the smallest limit found on the process's cgroup path and its ancestors, under
 * both the v2 (unified) and the v1 memory hierarchy, since any of them can be the one that bites.
 */
#include "util/sysmem.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYSMEM_GIB (1024ull * 1024 * 1024)
#define SYSMEM_UNLIMITED (1ull << 60) /* limits at or above this mean "none" */

/* Reads up to cap-1 bytes of a small file into buf (NUL-terminated); 0 ok. */
static int read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            close(fd);
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return 0;
}

/* Value in kB of "Key:   123 kB" inside text, as bytes; 0 ok. */
static int find_kb(const char *text, const char *key, uint64_t *out)
{
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) != 0 || p[klen] != ':') continue;
        const char *q = p + klen + 1;
        while (*q == ' ' || *q == '\t') q++;
        if (!isdigit((unsigned char)*q)) return -1;
        char *end;
        unsigned long long v = strtoull(q, &end, 10);
        if (v > (UINT64_MAX >> 10)) return -1;
        *out = (uint64_t)v * 1024;
        return 0;
    }
    return -1;
}

int sysmem_parse_meminfo(const char *text, uint64_t *total, uint64_t *available)
{
    if (find_kb(text, "MemTotal", total)) return -1;
    if (find_kb(text, "MemAvailable", available)) {
        /* kernels before 3.14: approximate with MemFree + Cached */
        uint64_t fr = 0, ca = 0;
        if (find_kb(text, "MemFree", &fr)) return -1;
        (void)find_kb(text, "Cached", &ca);
        *available = fr + ca;
    }
    return 0;
}

uint64_t sysmem_parse_limit(const char *text)
{
    while (*text == ' ' || *text == '\t') text++;
    if (!isdigit((unsigned char)*text)) return 0; /* "max" or garbage: no limit */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || v == 0 || v >= SYSMEM_UNLIMITED) return 0;
    return (uint64_t)v;
}

/* Smallest limit file `name` found in root/path and each of its ancestors up to root; 0 if none. */
static uint64_t limit_along(const char *root, const char *path, const char *name)
{
    char dir[1024], file[1200], buf[128];
    uint64_t best = 0;
    int n = snprintf(dir, sizeof dir, "%s%s", root, path);
    if (n < 0 || (size_t)n >= sizeof dir) return 0;
    size_t root_len = strlen(root);
    for (;;) {
        size_t len = strlen(dir);
        while (len > root_len && dir[len - 1] == '/') dir[--len] = '\0';
        snprintf(file, sizeof file, "%s/%s", dir, name);
        if (read_small(file, buf, sizeof buf) == 0) {
            uint64_t v = sysmem_parse_limit(buf);
            if (v && (!best || v < best)) best = v;
        }
        if (len <= root_len) break;
        char *slash = strrchr(dir + root_len, '/');
        if (!slash) break;
        *slash = '\0';
    }
    return best;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b)
{
    if (!a) return b;
    if (!b) return a;
    return a < b ? a : b;
}

static uint64_t cgroup_limit(void)
{
    char buf[4096];
    uint64_t best = 0;
    if (read_small("/proc/self/cgroup", buf, sizeof buf) != 0) buf[0] = '\0';
    char *save = NULL;
    int saw_v2 = 0, saw_v1 = 0;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = '\0';
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*ctrls) {
            saw_v2 = 1;
            best = min_nonzero(best, limit_along("/sys/fs/cgroup", path, "memory.max"));
            best = min_nonzero(best, limit_along("/sys/fs/cgroup/unified", path, "memory.max"));
        } else {
            char tmp[256];
            snprintf(tmp, sizeof tmp, ",%s,", ctrls);
            if (strstr(tmp, ",memory,")) {
                saw_v1 = 1;
                best = min_nonzero(best, limit_along("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes"));
            }
        }
    }
    if (!saw_v2) best = min_nonzero(best, limit_along("/sys/fs/cgroup", "", "memory.max"));
    if (!saw_v1) best = min_nonzero(best, limit_along("/sys/fs/cgroup/memory", "", "memory.limit_in_bytes"));
    return best;
}

int sysmem_read(struct sysmem_info *mi, struct err *e)
{
    char buf[8192];
    memset(mi, 0, sizeof *mi);
    if (read_small("/proc/meminfo", buf, sizeof buf) != 0) return err_set(e, "/proc/meminfo: cannot read");
    if (sysmem_parse_meminfo(buf, &mi->total_ram, &mi->mem_available))
        return err_set(e, "/proc/meminfo: no MemTotal/MemAvailable line");
    mi->cgroup_limit = cgroup_limit();
    return 0;
}

uint64_t sysmem_ram(const struct sysmem_info *mi)
{
    return min_nonzero(mi->total_ram, mi->cgroup_limit);
}

uint64_t sysmem_available(const struct sysmem_info *mi)
{
    return min_nonzero(mi->mem_available, mi->cgroup_limit);
}

uint64_t sysmem_default_headroom(const struct sysmem_info *mi)
{
    uint64_t h = sysmem_ram(mi) / 5;
    return h < 2 * SYSMEM_GIB ? 2 * SYSMEM_GIB : h;
}

uint64_t sysmem_auto_kv_bytes(const struct sysmem_info *mi, uint64_t weight_bytes, uint64_t scratch_bytes,
                              uint64_t headroom_bytes)
{
    uint64_t avail = sysmem_available(mi);
    uint64_t head = headroom_bytes == UINT64_MAX ? sysmem_default_headroom(mi) : headroom_bytes;
    uint64_t minus[3] = {weight_bytes, scratch_bytes, head};
    for (int i = 0; i < 3; i++) {
        if (minus[i] >= avail) return 0;
        avail -= minus[i];
    }
    return avail;
}

static uint64_t status_kb(const char *key)
{
    char buf[8192];
    uint64_t v = 0;
    if (read_small("/proc/self/status", buf, sizeof buf) != 0) return 0;
    if (find_kb(buf, key, &v)) return 0;
    return v;
}

uint64_t sysmem_rss_bytes(void)
{
    return status_kb("VmRSS");
}

uint64_t sysmem_peak_rss_bytes(void)
{
    return status_kb("VmHWM");
}

int sysmem_reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t w = write(fd, "5", 1);
    close(fd);
    return w == 1 ? 0 : -1;
}

int sysmem_parse_size(const char *s, uint64_t *out, struct err *e)
{
    if (!s || !*s) return err_set(e, "empty size");
    const char *p = s;
    if (!isdigit((unsigned char)*p) && *p != '.')
        return err_set(e, "size '%s': expected a number with an optional unit (K, M, G, T)", s);
    /* integer and fraction parts by hand: no locale, no exponent, no sign */
    uint64_t ip = 0;
    int n_digits = 0;
    while (isdigit((unsigned char)*p)) {
        if (ip > (1ull << 62) / 10) return err_set(e, "size '%s' is too large", s);
        ip = ip * 10 + (uint64_t)(*p++ - '0');
        n_digits++;
    }
    double frac = 0, scale = 0.1;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            frac += (*p++ - '0') * scale;
            scale /= 10;
            n_digits++;
        }
    }
    if (!n_digits) return err_set(e, "size '%s': expected a number", s);
    uint64_t mult = 1;
    switch (tolower((unsigned char)*p)) {
    case 'k': mult = 1ull << 10; p++; break;
    case 'm': mult = 1ull << 20; p++; break;
    case 'g': mult = 1ull << 30; p++; break;
    case 't': mult = 1ull << 40; p++; break;
    default: break;
    }
    if (mult > 1 && tolower((unsigned char)*p) == 'i') {
        p++;
        if (tolower((unsigned char)*p) != 'b') return err_set(e, "size '%s': bad unit", s);
    }
    if (tolower((unsigned char)*p) == 'b') p++;
    if (*p) return err_set(e, "size '%s': unexpected '%s' (units: K, M, G, T)", s, p);
    if (ip > (1ull << 62) / mult) return err_set(e, "size '%s' is too large", s);
    double total = (double)ip * (double)mult + frac * (double)mult;
    if (total > (double)(1ull << 62)) return err_set(e, "size '%s' is too large", s);
    *out = ip * mult + (uint64_t)(frac * (double)mult);
    return 0;
}
