/* gguf_int — what the reader (gguf.c, which also holds the type tables) shares with the writer
 * (gguf_write.c). Private to src/gguf/: nothing outside this folder includes it.
 */
#ifndef NS_GGUF_GGUF_INT_H
#define NS_GGUF_GGUF_INT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define GGUF_DEFAULT_ALIGNMENT 32 /* when general.alignment is absent */
#define GGUF_MAX_DIMS 4

/* Size of one fixed-size value; 0 for STRING, ARRAY and unknown types. */
uint64_t gguf_vtype_size(uint32_t t);

/* Makes room for need elements of elem bytes in *p (capacity *cap, doubling); 0 or -1 (out of memory, *p
 * unchanged). Callers bound need by their input's size, so need * elem does not overflow. */
int gguf_grow(void **p, uint64_t *cap, uint64_t need, size_t elem);

/* Raw views of an open file's metadata, for copying it into a writer (gguf_writer_copy_kv). All point
 * into the mapping and stay valid until gguf_close(). */
/* The value bytes of a fixed-size scalar kv (little-endian, maybe unaligned); NULL for other kvs. */
const void *gguf_kv_val(const gguf_file *f, uint64_t i);
/* A STRING kv's value; {NULL, 0} for other kvs. */
struct gguf_str gguf_kv_str(const gguf_file *f, uint64_t i);
/* The gguf_kv_arr_n(f, i) element views of an array of strings; NULL when kv i is not one or is empty. */
const struct gguf_str *gguf_kv_arr_strs(const gguf_file *f, uint64_t i);

#endif
