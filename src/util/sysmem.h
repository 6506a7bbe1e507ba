/* sysmem — what memory this process may use, and what it uses: total RAM, MemAvailable, the cgroup limit
 * (v2 memory.max or v1 memory.limit_in_bytes, the smallest along the process's cgroup path), current and
 * peak RSS. Plus the rule that turns these into a KV budget (`--kv-memory auto`) and a size parser for
 * flags ("512M", "2GiB", "1.5g"). Linux only; on other systems the readers report 0 (unknown).
 */
#ifndef NS_UTIL_SYSMEM_H
#define NS_UTIL_SYSMEM_H

#include <stdint.h>

#include "util/err.h"

struct sysmem_info {
    uint64_t total_ram;     /* MemTotal of /proc/meminfo (bytes) */
    uint64_t mem_available; /* MemAvailable of /proc/meminfo (bytes) */
    uint64_t cgroup_limit;  /* smallest memory limit along the cgroup path; 0 = no limit */
};

/* Reads /proc/meminfo and the cgroup limit. Fails only when /proc/meminfo cannot be read or parsed. */
int sysmem_read(struct sysmem_info *mi, struct err *e);

/* RAM this process can count on at most: min(total_ram, cgroup_limit). */
uint64_t sysmem_ram(const struct sysmem_info *mi);
/* Available now: min(mem_available, cgroup_limit). */
uint64_t sysmem_available(const struct sysmem_info *mi);
/* Default headroom left to the OS: 20% of the RAM this process can count on at most (min(total_ram,
 * cgroup_limit)), at least 2 GiB. */
uint64_t sysmem_default_headroom(const struct sysmem_info *mi);

/* The `--kv-memory auto` rule:
 *   kv = available - weights - scratch - headroom     (0 if that is negative)
 * where available = min(MemAvailable, cgroup limit) and headroom is the caller's (--headroom) or, when
 * headroom_bytes is UINT64_MAX, sysmem_default_headroom(). Weights are subtracted even though they are
 * mmapped (pages of the file compete with the KV pool for the same RAM). */
uint64_t sysmem_auto_kv_bytes(const struct sysmem_info *mi, uint64_t weight_bytes, uint64_t scratch_bytes,
                              uint64_t headroom_bytes);

/* Current and peak resident set size of this process (VmRSS / VmHWM of /proc/self/status); 0 if unknown. */
uint64_t sysmem_rss_bytes(void);
uint64_t sysmem_peak_rss_bytes(void);
/* Resets the peak RSS (VmHWM) to the current RSS (writes "5" to /proc/self/clear_refs); 0 ok. */
int sysmem_reset_peak_rss(void);

/* Parses a byte size: a decimal number (fraction allowed) with an optional unit K, M, G, T (powers of
 * 1024; "KB", "KiB", "MiB", ... and lower case accepted; "B" = bytes). "0" is valid. Rejects negative,
 * empty, trailing garbage and values over 2^62. */
int sysmem_parse_size(const char *s, uint64_t *out, struct err *e);

/* Parsers over text (exposed for tests): /proc/meminfo content -> fields (bytes); 0 ok. */
int sysmem_parse_meminfo(const char *text, uint64_t *total, uint64_t *available);
/* A cgroup limit file's content ("max\n" or a number) -> bytes; 0 means unlimited. */
uint64_t sysmem_parse_limit(const char *text);

#endif
