// Gives memory back to the kernel: the C heap's free pages, and pages of the process's own mappings.
//
// glibc returns freed memory to the system only from the top of its heap (above
// M_TRIM_THRESHOLD); pages that are free but sit below a live allocation stay in the
// process's RSS. The agent's native allocations (Buffers of netlink and child
// process reads, zlib streams, libbpf) come and go in bursts, so after one the heap
// is mostly holes: malloc_trim(0) madvises every free page away (glibc >= 2.8).
// Elsewhere (musl) there is no such call and nothing is done.
//
// pageOut: madvise(MADV_PAGEOUT) over one of the process's own mappings. The kernel reclaims the
// range's pages now instead of under memory pressure; a page used again is read back in. Which
// mappings, and when, is src/agent/startup-pages.ts's call.
#include <errno.h>
#include <stdbool.h>
#include <sys/mman.h>
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

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4; older C headers lack the name
#endif

// pageOut(start: bigint, length: bigint): undefined; throws the errno (EINVAL before Linux 5.4).
static napi_value page_out(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  uint64_t start, length;
  bool lossless;
  if (argc != 2 || napi_get_value_bigint_uint64(env, argv[0], &start, &lossless) != napi_ok || !lossless ||
      napi_get_value_bigint_uint64(env, argv[1], &length, &lossless) != napi_ok || !lossless)
    return throw_type(env, "pageOut(start: bigint, length: bigint)");
  if (madvise((void *)(uintptr_t)start, (size_t)length, MADV_PAGEOUT) != 0) return throw_errno(env, errno, "madvise(MADV_PAGEOUT)");
  return NULL;
}

napi_status register_mem(napi_env env, napi_value exports) {
  napi_value fn;
  napi_status s = napi_create_function(env, "trimCHeap", NAPI_AUTO_LENGTH, trim_c_heap, NULL, &fn);
  if (s != napi_ok) return s;
  s = napi_set_named_property(env, exports, "trimCHeap", fn);
  if (s != napi_ok) return s;
  s = napi_create_function(env, "pageOut", NAPI_AUTO_LENGTH, page_out, NULL, &fn);
  if (s != napi_ok) return s;
  return napi_set_named_property(env, exports, "pageOut", fn);
}
