// eBPF primitives for clbprobe over libbpf: open/load an object file, find its
// maps and programs, attach programs to an interface with TCX links or legacy
// tc cls_bpf filters, detach, and map element access. Only syscalls live here;
// what to attach where, key layouts and cleanup policy are TypeScript
// (src/capture/). Interface names are resolved, and tc/TCX calls made, inside
// the optional network namespace given as the last argument.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "addon.h"
#include "netns.h"

// Kernel >= 6.6 attach types; Debian 12's UAPI headers predate them.
#define CLBP_TCX_INGRESS 46
#define CLBP_TCX_EGRESS 47

// ---- libbpf messages -------------------------------------------------------
// libbpf reports why a load failed (verifier log, missing BTF, ...) through its
// print callback. Keep the tail of the messages of the current call, to put
// into the thrown error instead of onto stderr.
static char lib_log[2048];
static size_t lib_log_len;

static int on_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
  if (level == LIBBPF_DEBUG) return 0;
  // A verifier log arrives as one message of up to megabytes; its end matters.
  static char msg[1 << 16];
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  if (n <= 0) return 0;
  if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
  const char *text = msg;
  if ((size_t)n >= sizeof lib_log) {
    text = msg + n - (sizeof lib_log - 1);
    n = sizeof lib_log - 1;
  }
  if (lib_log_len + n >= sizeof lib_log) {  // drop the oldest text
    size_t drop = lib_log_len + n - sizeof lib_log + 1;
    memmove(lib_log, lib_log + drop, lib_log_len - drop);
    lib_log_len -= drop;
  }
  memcpy(lib_log + lib_log_len, text, n);
  lib_log_len += n;
  lib_log[lib_log_len] = 0;
  return 0;
}

static napi_value throw_libbpf(napi_env env, int err, const char *what) {
  char msg[2400];
  // Only the last lines: the verifier's verdict is at the end.
  const char *tail = lib_log;
  if (lib_log_len > 700) tail = lib_log + lib_log_len - 700;
  if (lib_log_len) snprintf(msg, sizeof msg, "%s (%s)", what, tail);
  else snprintf(msg, sizeof msg, "%s", what);
  // Single line: the CLI prints errors as one line.
  for (char *c = msg; *c; c++)
    if (*c == '\n') *c = ' ';
  return throw_errno(env, err, msg);
}

// ---- argument helpers ------------------------------------------------------
#define ARGS(n)                                                          \
  size_t argc = (n);                                                     \
  napi_value argv[(n)];                                                  \
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL)); \
  for (size_t i_ = argc; i_ < (n); i_++) argv[i_] = NULL

static int arg_int(napi_env env, napi_value v, int32_t *out) {
  return v && napi_get_value_int32(env, v, out) == napi_ok;
}
static int arg_u32(napi_env env, napi_value v, uint32_t *out) {
  return v && napi_get_value_uint32(env, v, out) == napi_ok;
}
static int arg_bool(napi_env env, napi_value v, bool *out) {
  return v && napi_get_value_bool(env, v, out) == napi_ok;
}
static int arg_str(napi_env env, napi_value v, char *buf, size_t size) {
  size_t len;
  return v && napi_get_value_string_utf8(env, v, buf, size, &len) == napi_ok && len < size - 1;
}

static napi_value make_u64(napi_env env, uint64_t v) {
  napi_value r;
  napi_create_bigint_uint64(env, v, &r);
  return r;
}

// ---- objects ---------------------------------------------------------------
typedef struct {
  struct bpf_object *obj;
} object_t;

static void object_finalize(napi_env env, void *data, void *hint) {
  object_t *o = data;
  if (o->obj) bpf_object__close(o->obj);
  free(o);
}

static object_t *get_object(napi_env env, napi_value v) {
  object_t *o = NULL;
  if (!v || napi_get_value_external(env, v, (void **)&o) != napi_ok) return NULL;
  return o;
}

// bpfObjectOpen(path): External. Parses the ELF file; nothing is loaded yet.
static napi_value object_open(napi_env env, napi_callback_info info) {
  ARGS(1);
  char path[4096];
  if (!arg_str(env, argv[0], path, sizeof path)) return throw_type(env, "bpfObjectOpen(path)");
  lib_log_len = 0;
  struct bpf_object *obj = bpf_object__open_file(path, NULL);
  if (!obj) return throw_libbpf(env, errno, "bpf_object__open_file");
  object_t *o = calloc(1, sizeof *o);
  if (!o) {
    bpf_object__close(obj);
    return throw_errno(env, ENOMEM, "calloc");
  }
  o->obj = obj;
  napi_value ext;
  NAPI_CALL(env, napi_create_external(env, o, object_finalize, NULL, &ext));
  return ext;
}

static struct bpf_map *find_map(napi_env env, object_t *o, napi_value name_v, char *name,
                                size_t size) {
  if (!arg_str(env, name_v, name, size)) return NULL;
  return bpf_object__find_map_by_name(o->obj, name);
}

// bpfObjectLoad(obj): creates the maps and loads (verifies) the programs.
static napi_value object_load(napi_env env, napi_callback_info info) {
  ARGS(1);
  object_t *o = get_object(env, argv[0]);
  if (!o || !o->obj) return throw_type(env, "bpfObjectLoad(obj)");
  lib_log_len = 0;
  // The verifier gives up with EAGAIN when a signal is pending, and libbpf retries only a few
  // times: under a CPU profiler (node --cpu-prof sends SIGPROF every 1 ms or less) every load
  // failed. Signals wait for the load instead; they are delivered when the mask is put back.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int r = bpf_object__load(o->obj);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (r < 0) return throw_libbpf(env, -r, "bpf_object__load");
  return NULL;
}

// bpfObjectMapFd(obj, name): fd, owned by the object.
static napi_value object_map_fd(napi_env env, napi_callback_info info) {
  ARGS(2);
  object_t *o = get_object(env, argv[0]);
  char name[64];
  if (!o || !o->obj) return throw_type(env, "bpfObjectMapFd(obj, name)");
  struct bpf_map *m = find_map(env, o, argv[1], name, sizeof name);
  if (!m) return throw_errno(env, ENOENT, "bpf map not in object");
  int fd = bpf_map__fd(m);
  if (fd < 0) return throw_errno(env, -fd, "bpf_map__fd (object not loaded?)");
  return make_int(env, fd);
}

// bpfObjectProgFd(obj, name): fd, owned by the object.
static napi_value object_prog_fd(napi_env env, napi_callback_info info) {
  ARGS(2);
  object_t *o = get_object(env, argv[0]);
  char name[64];
  if (!o || !o->obj || !arg_str(env, argv[1], name, sizeof name))
    return throw_type(env, "bpfObjectProgFd(obj, name)");
  struct bpf_program *p = bpf_object__find_program_by_name(o->obj, name);
  if (!p) return throw_errno(env, ENOENT, "bpf program not in object");
  int fd = bpf_program__fd(p);
  if (fd < 0) return throw_errno(env, -fd, "bpf_program__fd (object not loaded?)");
  return make_int(env, fd);
}

// bpfObjectClose(obj): closes all map and program fds of the object.
static napi_value object_close(napi_env env, napi_callback_info info) {
  ARGS(1);
  object_t *o = get_object(env, argv[0]);
  if (!o) return throw_type(env, "bpfObjectClose(obj)");
  if (o->obj) bpf_object__close(o->obj);
  o->obj = NULL;
  return NULL;
}

// ---- attach points -----------------------------------------------------------
// Resolves ifname inside the netns argument and leaves the thread there; the
// caller runs its tc/TCX call and then netns_leave().
static int enter_and_resolve(napi_env env, napi_value ifname_v, napi_value ns_v, netns_guard *g,
                             int *ifindex, napi_value *err) {
  char ifname[IF_NAMESIZE + 1];
  if (!arg_str(env, ifname_v, ifname, sizeof ifname)) {
    *err = throw_type(env, "interface name (at most 15 characters) expected");
    return -1;
  }
  const char *what = "";
  int e = netns_enter(env, ns_v, g, &what);
  if (e) {
    *err = throw_errno(env, e, what);
    return -1;
  }
  *ifindex = if_nametoindex(ifname);
  if (!*ifindex) {
    e = errno;
    netns_leave(g);
    char msg[96];
    snprintf(msg, sizeof msg, "interface %s", ifname);
    *err = throw_errno(env, e, msg);
    return -1;
  }
  return 0;
}

// bpfTcxAttach(progFd, ifname, egress, flags, netnsPath?): link fd. flags
// are BPF_F_BEFORE/AFTER (relative to no program: first/last). The link (and
// the attachment) lives as long as an fd refers to it: it dies with us.
static napi_value tcx_attach(napi_env env, napi_callback_info info) {
  ARGS(5);
  int32_t prog_fd;
  uint32_t flags;
  bool egress;
  if (!arg_int(env, argv[0], &prog_fd) || !arg_bool(env, argv[2], &egress) ||
      !arg_u32(env, argv[3], &flags))
    return throw_type(env, "bpfTcxAttach(progFd, ifname, egress, flags, netnsPath?)");
  netns_guard g;
  int ifindex;
  napi_value err;
  if (enter_and_resolve(env, argv[1], argv[4], &g, &ifindex, &err) < 0) return err;
  LIBBPF_OPTS(bpf_link_create_opts, o, .flags = flags);
  int fd = bpf_link_create(prog_fd, ifindex, egress ? CLBP_TCX_EGRESS : CLBP_TCX_INGRESS, &o);
  int e = errno;
  netns_leave(&g);
  if (fd < 0) return throw_errno(env, e, "bpf_link_create(TCX)");
  return make_int(env, fd);
}

// bpfTcxQuery(ifname, egress, netnsPath?): ids of the programs attached there.
static napi_value tcx_query(napi_env env, napi_callback_info info) {
  ARGS(3);
  bool egress;
  if (!arg_bool(env, argv[1], &egress)) return throw_type(env, "bpfTcxQuery(ifname, egress, netnsPath?)");
  netns_guard g;
  int ifindex;
  napi_value err;
  if (enter_and_resolve(env, argv[0], argv[2], &g, &ifindex, &err) < 0) return err;
  __u32 ids[64];
  LIBBPF_OPTS(bpf_prog_query_opts, q, .prog_ids = ids, .prog_cnt = 64);
  int r = bpf_prog_query_opts(ifindex, egress ? CLBP_TCX_EGRESS : CLBP_TCX_INGRESS, &q);
  int e = errno;
  netns_leave(&g);
  if (r < 0) return throw_errno(env, e, "bpf_prog_query(TCX)");
  napi_value arr;
  NAPI_CALL(env, napi_create_array_with_length(env, q.prog_cnt, &arr));
  for (uint32_t i = 0; i < q.prog_cnt && i < 64; i++) {
    napi_value v;
    napi_create_uint32(env, ids[i], &v);
    napi_set_element(env, arr, i, v);
  }
  return arr;
}

// bpfLinkDetach(linkFd): detaches and closes the link.
static napi_value link_detach(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (!arg_int(env, argv[0], &fd)) return throw_type(env, "bpfLinkDetach(linkFd)");
  int r = bpf_link_detach(fd);
  int e = errno;
  close(fd);
  if (r < 0) return throw_errno(env, e, "bpf_link_detach");
  return NULL;
}

// Legacy tc: (ifname, egress, handle, priority, ...) name one cls_bpf filter
// of the clsact qdisc. The qdisc is created when missing and never deleted.
// The filter a tc_* call names: (ifname, egress, handle, priority) in argv[0..3] and the netns
// path in argv[netns_at]. On success the thread is in that netns (leave with netns_leave(&t->g))
// and hook/opts name the filter; on failure nothing is entered and *err is the thrown error.
typedef struct {
  netns_guard g;
  struct bpf_tc_hook hook;
  struct bpf_tc_opts opts;
} tc_target;

static bool tc_enter(napi_env env, napi_value *argv, size_t netns_at, const char *usage, tc_target *t,
                     napi_value *err) {
  bool egress;
  uint32_t handle, prio;
  if (!arg_bool(env, argv[1], &egress) || !arg_u32(env, argv[2], &handle) || !arg_u32(env, argv[3], &prio) ||
      prio == 0 || prio > 0xffff || handle == 0) {
    *err = throw_type(env, usage);
    return false;
  }
  int ifindex;
  if (enter_and_resolve(env, argv[0], argv[netns_at], &t->g, &ifindex, err) < 0) return false;
  memset(&t->hook, 0, sizeof t->hook);
  t->hook.sz = sizeof t->hook;
  t->hook.ifindex = ifindex;
  t->hook.attach_point = egress ? BPF_TC_EGRESS : BPF_TC_INGRESS;
  memset(&t->opts, 0, sizeof t->opts);
  t->opts.sz = sizeof t->opts;
  t->opts.handle = handle;
  t->opts.priority = prio;
  return true;
}

// bpfTcAttach(ifname, egress, handle, priority, progFd, netnsPath?)
static napi_value tc_attach(napi_env env, napi_callback_info info) {
  ARGS(6);
  static const char usage[] = "bpfTcAttach(ifname, egress, handle, priority, progFd, netnsPath?)";
  int32_t prog_fd;
  if (!arg_int(env, argv[4], &prog_fd)) return throw_type(env, usage);
  tc_target t;
  napi_value err;
  if (!tc_enter(env, argv, 5, usage, &t, &err)) return err;
  int r = bpf_tc_hook_create(&t.hook);
  const char *what = "bpf_tc_hook_create(clsact)";
  if (r == 0 || r == -EEXIST) {
    t.opts.prog_fd = prog_fd;
    r = bpf_tc_attach(&t.hook, &t.opts);
    what = "bpf_tc_attach";
  }
  netns_leave(&t.g);
  if (r < 0) return throw_errno(env, -r, what);
  return NULL;
}

// bpfTcQuery(ifname, egress, handle, priority, netnsPath?): program id, 0 if none.
static napi_value tc_query(napi_env env, napi_callback_info info) {
  ARGS(5);
  tc_target t;
  napi_value err;
  if (!tc_enter(env, argv, 4, "bpfTcQuery(ifname, egress, handle, priority, netnsPath?)", &t, &err)) return err;
  int r = bpf_tc_query(&t.hook, &t.opts);
  netns_leave(&t.g);
  // ENOENT: no such filter; EINVAL: no clsact qdisc at all.
  if (r == -ENOENT || r == -EINVAL) return make_int(env, 0);
  if (r < 0) return throw_errno(env, -r, "bpf_tc_query");
  napi_value v;
  napi_create_uint32(env, t.opts.prog_id, &v);
  return v;
}

// bpfTcDetach(ifname, egress, handle, priority, netnsPath?): false if absent.
static napi_value tc_detach(napi_env env, napi_callback_info info) {
  ARGS(5);
  tc_target t;
  napi_value err;
  if (!tc_enter(env, argv, 4, "bpfTcDetach(ifname, egress, handle, priority, netnsPath?)", &t, &err)) return err;
  int r = bpf_tc_detach(&t.hook, &t.opts);
  netns_leave(&t.g);
  napi_value out;
  napi_get_boolean(env, r == 0, &out);
  // ENOENT: no such filter; EINVAL: no clsact qdisc at all.
  if (r == -ENOENT || r == -EINVAL || r == 0) return out;
  return throw_errno(env, -r, "bpf_tc_detach");
}

// ---- programs ----------------------------------------------------------------
static napi_value info_object(napi_env env, int fd) {
  struct bpf_prog_info pi;
  memset(&pi, 0, sizeof pi);
  __u32 len = sizeof pi;
  if (bpf_obj_get_info_by_fd(fd, &pi, &len) < 0) return throw_errno(env, errno, "bpf_obj_get_info_by_fd");
  napi_value o, v;
  napi_create_object(env, &o);
  napi_create_uint32(env, pi.id, &v);
  napi_set_named_property(env, o, "id", v);
  napi_create_string_utf8(env, pi.name, strnlen(pi.name, sizeof pi.name), &v);
  napi_set_named_property(env, o, "name", v);
  // Both stay 0 unless kernel.bpf_stats_enabled is 1.
  napi_set_named_property(env, o, "runTimeNs", make_u64(env, pi.run_time_ns));
  napi_set_named_property(env, o, "runCount", make_u64(env, pi.run_cnt));
  return o;
}

// bpfProgInfo(progFd): {id, name, runTimeNs, runCount}
static napi_value prog_info(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (!arg_int(env, argv[0], &fd)) return throw_type(env, "bpfProgInfo(progFd)");
  return info_object(env, fd);
}

// bpfProgInfoById(id): same as bpfProgInfo, or null when no such program.
static napi_value prog_info_by_id(napi_env env, napi_callback_info info) {
  ARGS(1);
  uint32_t id;
  if (!arg_u32(env, argv[0], &id)) return throw_type(env, "bpfProgInfoById(id)");
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) {
    if (errno == ENOENT) {
      napi_value n;
      napi_get_null(env, &n);
      return n;
    }
    return throw_errno(env, errno, "bpf_prog_get_fd_by_id");
  }
  napi_value o = info_object(env, fd);
  close(fd);
  return o;
}

// ---- maps --------------------------------------------------------------------
// bpfMapUpdate(fd, key, value, flags)
static napi_value map_update(napi_env env, napi_callback_info info) {
  ARGS(4);
  int32_t fd;
  uint32_t flags;
  void *k, *v;
  size_t kl, vl;
  if (!arg_int(env, argv[0], &fd) || !argv[1] || get_bytes(env, argv[1], &k, &kl) != napi_ok ||
      !argv[2] || get_bytes(env, argv[2], &v, &vl) != napi_ok || !arg_u32(env, argv[3], &flags))
    return throw_type(env, "bpfMapUpdate(fd, key, value, flags)");
  if (bpf_map_update_elem(fd, k, v, flags) < 0) return throw_errno(env, errno, "bpf_map_update_elem");
  return NULL;
}

// bpfMapDelete(fd, key): false when the key was absent.
static napi_value map_delete(napi_env env, napi_callback_info info) {
  ARGS(2);
  int32_t fd;
  void *k;
  size_t kl;
  if (!arg_int(env, argv[0], &fd) || !argv[1] || get_bytes(env, argv[1], &k, &kl) != napi_ok)
    return throw_type(env, "bpfMapDelete(fd, key)");
  int r = bpf_map_delete_elem(fd, k);
  if (r < 0 && errno != ENOENT) return throw_errno(env, errno, "bpf_map_delete_elem");
  napi_value out;
  napi_get_boolean(env, r == 0, &out);
  return out;
}

// bpfMapLookup(fd, key, value): false when absent. Per-CPU maps fill one
// 8-byte-aligned slot per possible CPU.
static napi_value map_lookup(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t fd;
  void *k, *v;
  size_t kl, vl;
  if (!arg_int(env, argv[0], &fd) || !argv[1] || get_bytes(env, argv[1], &k, &kl) != napi_ok ||
      !argv[2] || get_bytes(env, argv[2], &v, &vl) != napi_ok)
    return throw_type(env, "bpfMapLookup(fd, key, value)");
  int r = bpf_map_lookup_elem(fd, k, v);
  if (r < 0 && errno != ENOENT) return throw_errno(env, errno, "bpf_map_lookup_elem");
  napi_value out;
  napi_get_boolean(env, r == 0, &out);
  return out;
}

// bpfMapGetNextKey(fd, key | null, next): the key after `key` (the first with
// null) into `next`; false at the end. For kernels without batch lookups.
static napi_value map_get_next_key(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t fd;
  void *k = NULL, *n;
  size_t kl, nl;
  napi_valuetype t = napi_undefined;
  if (argv[1]) napi_typeof(env, argv[1], &t);
  if (!arg_int(env, argv[0], &fd) || (t != napi_null && (!argv[1] || get_bytes(env, argv[1], &k, &kl) != napi_ok)) ||
      !argv[2] || get_bytes(env, argv[2], &n, &nl) != napi_ok)
    return throw_type(env, "bpfMapGetNextKey(fd, key | null, next)");
  int r = bpf_map_get_next_key(fd, k, n);
  if (r < 0 && errno != ENOENT) return throw_errno(env, errno, "bpf_map_get_next_key");
  napi_value out;
  napi_get_boolean(env, r == 0, &out);
  return out;
}

// bpfMapLookupBatch(fd, keys, values, token, first, status): one batch of a
// hash map walk. token is an 8-byte buffer kept between calls; status[0] gets
// the number of entries read, status[1] = 1 once the walk is complete. The
// buffers' sizes bound the batch (keys: n*keySize, values: n*valueSize).
static napi_value map_lookup_batch(napi_env env, napi_callback_info info) {
  ARGS(7);
  int32_t fd;
  uint32_t max;
  bool first;
  void *k, *v, *tok, *st;
  size_t kl, vl, tl, sl;
  if (!arg_int(env, argv[0], &fd) || !argv[1] || get_bytes(env, argv[1], &k, &kl) != napi_ok ||
      !argv[2] || get_bytes(env, argv[2], &v, &vl) != napi_ok || !argv[3] ||
      get_bytes(env, argv[3], &tok, &tl) != napi_ok || tl < 8 || !arg_bool(env, argv[4], &first) ||
      !argv[5] || get_bytes(env, argv[5], &st, &sl) != napi_ok || sl < 8 ||
      !arg_u32(env, argv[6], &max) || max == 0)
    return throw_type(env, "bpfMapLookupBatch(fd, keys, values, token, first, status, maxCount)");
  __u32 count = max;
  int r = bpf_map_lookup_batch(fd, first ? NULL : tok, tok, k, v, &count, NULL);
  int32_t *status = st;
  if (r < 0 && errno != ENOENT) return throw_errno(env, errno, "bpf_map_lookup_batch");
  status[0] = (int32_t)count;
  status[1] = r < 0;  // ENOENT: no more entries after these
  return NULL;
}

// bpfPossibleCpus(): number of per-CPU value slots.
static napi_value possible_cpus(napi_env env, napi_callback_info info) {
  int n = libbpf_num_possible_cpus();
  if (n < 0) return throw_errno(env, -n, "libbpf_num_possible_cpus");
  return make_int(env, n);
}

napi_status register_bpf(napi_env env, napi_value exports) {
  libbpf_set_print(on_libbpf_print);
  napi_property_descriptor props[] = {
      {"bpfObjectOpen", NULL, object_open, NULL, NULL, NULL, napi_default, NULL},
      {"bpfObjectLoad", NULL, object_load, NULL, NULL, NULL, napi_default, NULL},
      {"bpfObjectMapFd", NULL, object_map_fd, NULL, NULL, NULL, napi_default, NULL},
      {"bpfObjectProgFd", NULL, object_prog_fd, NULL, NULL, NULL, napi_default, NULL},
      {"bpfObjectClose", NULL, object_close, NULL, NULL, NULL, napi_default, NULL},
      {"bpfTcxAttach", NULL, tcx_attach, NULL, NULL, NULL, napi_default, NULL},
      {"bpfTcxQuery", NULL, tcx_query, NULL, NULL, NULL, napi_default, NULL},
      {"bpfLinkDetach", NULL, link_detach, NULL, NULL, NULL, napi_default, NULL},
      {"bpfTcAttach", NULL, tc_attach, NULL, NULL, NULL, napi_default, NULL},
      {"bpfTcQuery", NULL, tc_query, NULL, NULL, NULL, napi_default, NULL},
      {"bpfTcDetach", NULL, tc_detach, NULL, NULL, NULL, napi_default, NULL},
      {"bpfProgInfo", NULL, prog_info, NULL, NULL, NULL, napi_default, NULL},
      {"bpfProgInfoById", NULL, prog_info_by_id, NULL, NULL, NULL, napi_default, NULL},
      {"bpfMapUpdate", NULL, map_update, NULL, NULL, NULL, napi_default, NULL},
      {"bpfMapDelete", NULL, map_delete, NULL, NULL, NULL, napi_default, NULL},
      {"bpfMapLookup", NULL, map_lookup, NULL, NULL, NULL, napi_default, NULL},
      {"bpfMapLookupBatch", NULL, map_lookup_batch, NULL, NULL, NULL, napi_default, NULL},
      {"bpfMapGetNextKey", NULL, map_get_next_key, NULL, NULL, NULL, napi_default, NULL},
      {"bpfPossibleCpus", NULL, possible_cpus, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
