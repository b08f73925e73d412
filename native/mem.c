// Gives the C heap's free pages back to the kernel.
//
// glibc returns freed memory to the system only from the top of its heap (above
// M_TRIM_THRESHOLD); pages that are free but sit below a live allocation stay in the
// process's RSS. The agent's native allocations (Buffers of netlink and child
// process reads, zlib streams, libbpf) come and go in bursts, so after one the heap
// is mostly holes: malloc_trim(0) madvises every free page away (glibc >= 2.8).
// Elsewhere (musl) there is no such call and nothing is done.
#include <stdbool.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "addon.h"

static napi_value trim_c_heap(napi_env env, napi_callback_info info) {
#if defined(__GLIBC__)
  bool released = malloc_trim(0) != 0;
#else
  bool released = false;
#endif
  napi_value r;
  NAPI_CALL(env, napi_get_boolean(env, released, &r));
  return r;
}

napi_status register_mem(napi_env env, napi_value exports) {
  napi_value fn;
  napi_status s = napi_create_function(env, "trimCHeap", NAPI_AUTO_LENGTH, trim_c_heap, NULL, &fn);
  if (s != napi_ok) return s;
  return napi_set_named_property(env, exports, "trimCHeap", fn);
}
