// Module init and small helpers shared by the addon's source files.
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "addon.h"

static const char *errno_name(int err) {
  switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EINVAL: return "EINVAL";
    case ENOBUFS: return "ENOBUFS";
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EMSGSIZE: return "EMSGSIZE";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOMEM: return "ENOMEM";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    default: return "EUNKNOWN";
  }
}

napi_value throw_errno(napi_env env, int err, const char *what) {
  // Room for what throw_libbpf passes (a verifier log's last 700 bytes) and the errno text after
  // it: a 256-byte message cut both, the verdict and the reason.
  char msg[3072];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_value m, code, e, n;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &m);
  napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code);
  napi_create_error(env, code, m, &e);
  napi_create_int32(env, err, &n);
  napi_set_named_property(env, e, "errno", n);
  napi_set_named_property(env, e, "syscall", m);
  napi_throw(env, e);
  return NULL;
}

napi_value throw_type(napi_env env, const char *usage) {
  napi_throw_type_error(env, NULL, usage);
  return NULL;
}

napi_value make_int(napi_env env, int32_t v) {
  napi_value r;
  napi_create_int32(env, v, &r);
  return r;
}

napi_status get_bytes(napi_env env, napi_value v, void **data, size_t *len) {
  bool is;
  napi_status s = napi_is_typedarray(env, v, &is);
  if (s != napi_ok) return s;
  if (is) {
    napi_typedarray_type type;
    size_t count, offset;
    napi_value ab;
    s = napi_get_typedarray_info(env, v, &type, &count, data, &ab, &offset);
    if (s != napi_ok) return s;
    size_t el = 1;
    switch (type) {
      case napi_int16_array: case napi_uint16_array: el = 2; break;
      case napi_int32_array: case napi_uint32_array: case napi_float32_array: el = 4; break;
      case napi_float64_array: case napi_bigint64_array: case napi_biguint64_array: el = 8; break;
      default: el = 1;
    }
    *len = count * el;
    return napi_ok;
  }
  s = napi_is_arraybuffer(env, v, &is);
  if (s != napi_ok) return s;
  if (is) return napi_get_arraybuffer_info(env, v, data, len);
  return napi_invalid_arg;
}

static napi_value init(napi_env env, napi_value exports) {
  if (register_netlink(env, exports) != napi_ok) return NULL;
  if (register_poll(env, exports) != napi_ok) return NULL;
  if (register_bpf(env, exports) != napi_ok) return NULL;
  if (register_pcap(env, exports) != napi_ok) return NULL;
  if (register_mem(env, exports) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
