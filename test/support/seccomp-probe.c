// Makes each system call the agent's seccomp profile must refuse, each in a
// forked child, with arguments the kernel itself would reject differently (a
// bad fd, a missing capability), and prints "name errno" (0: it succeeded), so
// a test tells the filter's answer from the kernel's by running it both under
// the profile and unconfined. Also proves what must keep working: fork,
// threads (glibc tries clone3 first), bpf() and perf_event_open() reach the
// kernel. Built static (test/lab/seccomp-profile.test.ts) to run in any image.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long probe(const char *name) {
  if (!strcmp(name, "unshare")) return syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS);
  if (!strcmp(name, "unshare-net")) return syscall(SYS_unshare, CLONE_NEWNET);
  if (!strcmp(name, "clone-newuser")) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid((pid_t)pid, NULL, 0);
    return pid < 0 ? -1 : 0;
  }
  if (!strcmp(name, "clone3")) return syscall(SYS_clone3, NULL, 0);
  if (!strcmp(name, "keyctl")) return syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0);
  if (!strcmp(name, "add_key")) return syscall(SYS_add_key, "user", "clbprobe-probe", "x", 1, -3);
  if (!strcmp(name, "request_key")) return syscall(SYS_request_key, "user", "clbprobe-probe", NULL, 0);
  if (!strcmp(name, "setns")) return syscall(SYS_setns, -1, 0);
  if (!strcmp(name, "mount")) return syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL);
  if (!strcmp(name, "umount2")) return syscall(SYS_umount2, "/proc", 0);
  if (!strcmp(name, "fsopen")) return syscall(SYS_fsopen, "tmpfs", 0);
  if (!strcmp(name, "fsconfig")) return syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0);
  if (!strcmp(name, "fsmount")) return syscall(SYS_fsmount, -1, 0, 0);
  if (!strcmp(name, "fspick")) return syscall(SYS_fspick, -1, "", 0);
  if (!strcmp(name, "move_mount")) return syscall(SYS_move_mount, -1, "", -1, "", 0);
  if (!strcmp(name, "open_tree")) return syscall(SYS_open_tree, -1, "", 0);
  if (!strcmp(name, "mount_setattr")) return syscall(SYS_mount_setattr, -1, "", 0, NULL, 0);
  if (!strcmp(name, "pivot_root")) return syscall(SYS_pivot_root, "/nonexistent", "/nonexistent");
  // A wrong magic number: the kernel refuses it even with CAP_SYS_BOOT.
  if (!strcmp(name, "reboot")) return syscall(SYS_reboot, 0, 0, 0, NULL);
  if (!strcmp(name, "syslog")) return syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
  if (!strcmp(name, "pidfd_getfd")) return syscall(SYS_pidfd_getfd, -1, 0, 0);
  if (!strcmp(name, "mbind")) return syscall(SYS_mbind, NULL, 0, 0, NULL, 0, 0);
  if (!strcmp(name, "set_mempolicy")) return syscall(SYS_set_mempolicy, 0, NULL, 0);
  if (!strcmp(name, "get_mempolicy")) return syscall(SYS_get_mempolicy, NULL, NULL, 0, NULL, 0);
  if (!strcmp(name, "ptrace")) return syscall(SYS_ptrace, -1L, 0, NULL, NULL);
  if (!strcmp(name, "process_vm_readv")) return syscall(SYS_process_vm_readv, 0, NULL, 0, NULL, 0, 0);
  if (!strcmp(name, "name_to_handle_at")) return syscall(SYS_name_to_handle_at, -1, "", NULL, NULL, 0);
  // What the agent needs: each must reach the kernel.
  if (!strcmp(name, "fork")) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return pid < 0 ? -1 : 0;
  }
  if (!strcmp(name, "thread")) {
    pthread_t t;
    int e = pthread_create(&t, NULL, (void *(*)(void *))pthread_self, NULL);
    if (e) {
      errno = e;
      return -1;
    }
    pthread_join(t, NULL);
    return 0;
  }
  if (!strcmp(name, "bpf")) return syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, NULL, 0);
  if (!strcmp(name, "perf_event_open")) return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0);
  fprintf(stderr, "unknown probe %s\n", name);
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      errno = 0;
      long r = probe(argv[i]);
      _exit(r < 0 ? (errno & 0xff) : 0);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return 1;
    printf("%s %d\n", argv[i], WEXITSTATUS(status));
  }
  return 0;
}
