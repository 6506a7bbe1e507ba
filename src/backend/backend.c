/* backend — the seam; backend-independent helpers. Each backend lives in its own file (cpu.c, ...). */
#include "backend/backend.h"

#include <stddef.h>

void backend_free(struct backend *b)
{
    if (!b || !b->ops) return;
    if (b->ops->free) b->ops->free(b->ctx);
    b->ops = NULL;
    b->ctx = NULL;
}
