// Gives memory back to the kernel: pages of the process's own mappings.
//
// pageOut: madvise(MADV_PAGEOUT) over one of the process's own mappings. The kernel reclaims the
// range's pages now instead of under memory pressure; a page used again is read back in. Which
// mappings, and when, is src/agent/startup-pages.ts's call.
#include <errno.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "addon.h"

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
  napi_status s = napi_create_function(env, "pageOut", NAPI_AUTO_LENGTH, page_out, NULL, &fn);
  if (s != napi_ok) return s;
  return napi_set_named_property(env, exports, "pageOut", fn);
}
