// Shared helpers of the clbprobe N-API addon. Each source file registers its
// own functions from addon.c's module init.
#ifndef CLBPROBE_ADDON_H
#define CLBPROBE_ADDON_H
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

#define NAPI_CALL(env, call)                                      \
  do {                                                            \
    if ((call) != napi_ok) {                                      \
      napi_throw_error((env), NULL, "N-API call failed: " #call); \
      return NULL;                                                \
    }                                                             \
  } while (0)

// Throws an Error with .code = "E..." name and .errno = n; returns NULL.
napi_value throw_errno(napi_env env, int err, const char *what);
napi_value throw_type(napi_env env, const char *usage);
napi_value make_int(napi_env env, int32_t v);
// Data pointer and byte length of a TypedArray, Buffer or ArrayBuffer.
napi_status get_bytes(napi_env env, napi_value v, void **data, size_t *len);

napi_status register_netlink(napi_env env, napi_value exports);
napi_status register_poll(napi_env env, napi_value exports);
napi_status register_bpf(napi_env env, napi_value exports);
napi_status register_pcap(napi_env env, napi_value exports);
napi_status register_mem(napi_env env, napi_value exports);
#endif
