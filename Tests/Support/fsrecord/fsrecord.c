/*
 * fsrecord: an LD_PRELOAD shim that records a process's file-system mutations under one
 * directory, for the power-cut explorer (scripts/powercut, docs/FAULTS.md section 8).
 *
 *   FSREC_ROOT=/abs/dir FSREC_LOG=/abs/oplog LD_PRELOAD=fsrecord.so ferryd ...
 *
 * Every successful mutation of a path under FSREC_ROOT is appended to FSREC_LOG as one record,
 * written with a single write(2) on an O_APPEND descriptor, so records of several processes
 * (the agent here, the explorer's clients marking their acks) interleave whole and in the order
 * they happened. A record is a text line, then `len` raw bytes:
 *
 *   <op>\t<pid>\t<inode>\t<arg1>\t<arg2>\t<len>\n<len bytes>
 *
 *   creat  PATH -        0     a regular file came into existence (open with O_CREAT)
 *   mkdir  PATH -        0
 *   write  PATH OFFSET   N     N bytes written at OFFSET (the bytes follow)
 *   trunc  PATH LENGTH   0     ftruncate/truncate/O_TRUNC
 *   sync   PATH -        0     fsync/fdatasync of PATH (file or directory) returned 0
 *   rename FROM TO       0
 *   unlink PATH -        0
 *   rmdir  PATH -        0
 *   link   FROM TO       0
 *
 * PATHs are relative to FSREC_ROOT ("." for the root itself). <inode> is the inode number of the
 * file an operation through a descriptor (write, trunc, sync) or a creation touched, 0 for the
 * others: a descriptor's path is the name it was opened by, and the file may have been renamed
 * since. Operations are logged after the
 * real call returned successfully: a `sync` record means the data was durable at that point.
 * FSREC_SYNC_DELAY_US, if set, sleeps that long before each fsync/fdatasync, like a disk whose
 * flush takes time (it widens the window in which an ack sent before the sync can be seen).
 *
 * Build: cc -shared -fPIC -O2 -o fsrecord.so fsrecord.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX];
static size_t root_len;
static int log_fd = -1;
static int enabled;
static long sync_delay_us;
static char *fd_paths[MAX_FDS]; /* relative path of each watched descriptor */

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rmdir)(const char *);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_link)(const char *, const char *);

#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)

__attribute__((constructor)) static void fsrecord_init(void) {
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64); RESOLVE(creat);
    RESOLVE(close); RESOLVE(write); RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(writev);
    RESOLVE(pwritev); RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(ftruncate); RESOLVE(ftruncate64);
    RESOLVE(truncate); RESOLVE(rename); RESOLVE(renameat); RESOLVE(renameat2); RESOLVE(unlink);
    RESOLVE(unlinkat); RESOLVE(rmdir); RESOLVE(mkdir); RESOLVE(mkdirat); RESOLVE(link);
    const char *r = getenv("FSREC_ROOT"), *l = getenv("FSREC_LOG");
    if (!r || !l || !realpath(r, root)) return;
    root_len = strlen(root);
    log_fd = (int)syscall(SYS_openat, AT_FDCWD, l, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0) return;
    const char *d = getenv("FSREC_SYNC_DELAY_US");
    sync_delay_us = d ? atol(d) : 0;
    enabled = 1;
}

/* Lexically normalises `path` (relative to `base` if not absolute) into `out`. */
static void normalise(const char *base, const char *path, char *out) {
    char buf[2 * PATH_MAX];
    if (path[0] == '/') snprintf(buf, sizeof buf, "%s", path);
    else snprintf(buf, sizeof buf, "%s/%s", base, path);
    size_t n = 0;
    out[0] = 0;
    char *save = NULL;
    for (char *part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0) continue;
        if (strcmp(part, "..") == 0) {
            while (n > 0 && out[n - 1] != '/') n--;
            if (n > 0) n--;
            out[n] = 0;
            continue;
        }
        size_t k = strlen(part);
        if (n + 1 + k >= PATH_MAX) break;
        out[n++] = '/';
        memcpy(out + n, part, k);
        n += k;
        out[n] = 0;
    }
    if (n == 0) strcpy(out, "/");
}

/* The path relative to the root (malloc'd), or NULL if it is outside. */
static char *relative(int dirfd, const char *path) {
    if (!enabled || !path) return NULL;
    char base[PATH_MAX], full[PATH_MAX];
    if (path[0] == '/') {
        base[0] = 0;
    } else if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return NULL;
    } else if (dirfd >= 0 && dirfd < MAX_FDS && fd_paths[dirfd]) {
        snprintf(base, sizeof base, "%s/%s", root, fd_paths[dirfd]);
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t k = readlink(link, base, sizeof base - 1);
        if (k < 0) return NULL;
        base[k] = 0;
    }
    normalise(base, path, full);
    if (strncmp(full, root, root_len) != 0) return NULL;
    if (full[root_len] == 0) return strdup(".");
    if (full[root_len] != '/') return NULL;
    return strdup(full + root_len + 1);
}

/* Appends one record; call with `lock` held. */
static void record_ino(const char *op, unsigned long long ino, const char *a, const char *b, const void *data, size_t len) {
    char head[3 * PATH_MAX];
    int n = snprintf(head, sizeof head, "%s\t%d\t%llu\t%s\t%s\t%zu\n", op, (int)getpid(), ino, a, b ? b : "-", len);
    if (n < 0 || (size_t)n >= sizeof head) return;
    char *buf = malloc((size_t)n + len);
    if (!buf) return;
    memcpy(buf, head, (size_t)n);
    if (len) memcpy(buf + n, data, len);
    size_t total = (size_t)n + len, done = 0;
    while (done < total) {
        ssize_t w = syscall(SYS_write, log_fd, buf + done, total - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    free(buf);
}

static void record(const char *op, const char *a, const char *b, const void *data, size_t len) {
    record_ino(op, 0, a, b, data, len);
}

static unsigned long long ino_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static const char *watched(int fd) {
    return (enabled && fd >= 0 && fd < MAX_FDS) ? fd_paths[fd] : NULL;
}

static int exists_at(int dirfd, const char *path) {
    struct stat st;
    return fstatat(dirfd, path, &st, 0) == 0;
}

static int do_open(int dirfd, const char *path, int flags, mode_t mode, int at) {
    char *rel = relative(dirfd, path);
    if (!rel) {
        if (at) return real_openat(dirfd, path, flags, mode);
        return real_open(path, flags, mode);
    }
    pthread_mutex_lock(&lock);
    int existed = (flags & O_CREAT) ? exists_at(dirfd, path) : 1;
    int fd = at ? real_openat(dirfd, path, flags, mode) : real_open(path, flags, mode);
    int saved = errno;
    if (fd >= 0 && fd < MAX_FDS) {
        free(fd_paths[fd]);
        fd_paths[fd] = rel;
        if (!existed) record_ino("creat", ino_of(fd), rel, NULL, NULL, 0);
        else if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) record_ino("trunc", ino_of(fd), rel, "0", NULL, 0);
    } else {
        free(rel);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_arg(flags, args); va_end(args);
    return do_open(AT_FDCWD, path, flags, mode, 0);
}
int open64(const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_arg(flags, args); va_end(args);
    return do_open(AT_FDCWD, path, flags, mode, 0);
}
int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0, 0); }
int __open64_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0, 0); }
int openat(int dirfd, const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_arg(flags, args); va_end(args);
    return do_open(dirfd, path, flags, mode, 1);
}
int openat64(int dirfd, const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_arg(flags, args); va_end(args);
    return do_open(dirfd, path, flags, mode, 1);
}
int __openat_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0, 1); }
int creat(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode, 0); }
int creat64(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode, 0); }

int close(int fd) {
    if (!watched(fd)) return real_close(fd);
    pthread_mutex_lock(&lock);
    int result = real_close(fd);
    int saved = errno;
    free(fd_paths[fd]);
    fd_paths[fd] = NULL;
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

static void record_write(int fd, off_t offset, const void *data, ssize_t n) {
    if (n <= 0) return;
    char off[32];
    snprintf(off, sizeof off, "%lld", (long long)offset);
    record_ino("write", ino_of(fd), fd_paths[fd], off, data, (size_t)n);
}

ssize_t write(int fd, const void *data, size_t count) {
    if (!watched(fd)) return real_write(fd, data, count);
    pthread_mutex_lock(&lock);
    off_t offset = (fcntl(fd, F_GETFL) & O_APPEND) ? lseek(fd, 0, SEEK_END) : lseek(fd, 0, SEEK_CUR);
    ssize_t n = real_write(fd, data, count);
    int saved = errno;
    if (watched(fd)) record_write(fd, offset, data, n);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

static ssize_t do_pwrite(int fd, const void *data, size_t count, off_t offset, int is64) {
    if (!watched(fd)) return is64 ? real_pwrite64(fd, data, count, offset) : real_pwrite(fd, data, count, offset);
    pthread_mutex_lock(&lock);
    ssize_t n = is64 ? real_pwrite64(fd, data, count, offset) : real_pwrite(fd, data, count, offset);
    int saved = errno;
    if (watched(fd)) record_write(fd, offset, data, n);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}
ssize_t pwrite(int fd, const void *data, size_t count, off_t offset) { return do_pwrite(fd, data, count, offset, 0); }
ssize_t pwrite64(int fd, const void *data, size_t count, off_t offset) { return do_pwrite(fd, data, count, offset, 1); }

/* The bytes of an iovec array that were written (the first n), flattened. */
static void *flatten(const struct iovec *iov, int cnt, ssize_t n) {
    if (n <= 0) return NULL;
    char *buf = malloc((size_t)n), *p = buf;
    size_t left = (size_t)n;
    for (int i = 0; buf && i < cnt && left; i++) {
        size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
        memcpy(p, iov[i].iov_base, k);
        p += k;
        left -= k;
    }
    return buf;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    if (!watched(fd)) return real_writev(fd, iov, cnt);
    pthread_mutex_lock(&lock);
    off_t offset = (fcntl(fd, F_GETFL) & O_APPEND) ? lseek(fd, 0, SEEK_END) : lseek(fd, 0, SEEK_CUR);
    ssize_t n = real_writev(fd, iov, cnt);
    int saved = errno;
    void *flat = flatten(iov, cnt, n);
    if (flat && watched(fd)) record_write(fd, offset, flat, n);
    free(flat);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t offset) {
    if (!watched(fd)) return real_pwritev(fd, iov, cnt, offset);
    pthread_mutex_lock(&lock);
    ssize_t n = real_pwritev(fd, iov, cnt, offset);
    int saved = errno;
    void *flat = flatten(iov, cnt, n);
    if (flat && watched(fd)) record_write(fd, offset, flat, n);
    free(flat);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

/* The sync runs outside the lock (other threads' writes proceed); it is logged once it returned,
 * so every write that completed before it started is logged before it. */
static int do_sync(int fd, int data_only) {
    if (!watched(fd)) return data_only ? real_fdatasync(fd) : real_fsync(fd);
    if (sync_delay_us > 0) usleep((useconds_t)sync_delay_us);
    int result = data_only ? real_fdatasync(fd) : real_fsync(fd);
    int saved = errno;
    if (result == 0) {
        pthread_mutex_lock(&lock);
        if (watched(fd)) record_ino("sync", ino_of(fd), fd_paths[fd], NULL, NULL, 0);
        pthread_mutex_unlock(&lock);
    }
    errno = saved;
    return result;
}
int fsync(int fd) { return do_sync(fd, 0); }
int fdatasync(int fd) { return do_sync(fd, 1); }

static int do_ftruncate(int fd, off_t length, int is64) {
    if (!watched(fd)) return is64 ? real_ftruncate64(fd, length) : real_ftruncate(fd, length);
    pthread_mutex_lock(&lock);
    int result = is64 ? real_ftruncate64(fd, length) : real_ftruncate(fd, length);
    int saved = errno;
    if (result == 0 && watched(fd)) {
        char len[32];
        snprintf(len, sizeof len, "%lld", (long long)length);
        record_ino("trunc", ino_of(fd), fd_paths[fd], len, NULL, 0);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}
int ftruncate(int fd, off_t length) { return do_ftruncate(fd, length, 0); }
int ftruncate64(int fd, off_t length) { return do_ftruncate(fd, length, 1); }

int truncate(const char *path, off_t length) {
    char *rel = relative(AT_FDCWD, path);
    if (!rel) return real_truncate(path, length);
    pthread_mutex_lock(&lock);
    int result = real_truncate(path, length);
    int saved = errno;
    if (result == 0) {
        char len[32];
        snprintf(len, sizeof len, "%lld", (long long)length);
        record("trunc", rel, len, NULL, 0);
    }
    pthread_mutex_unlock(&lock);
    free(rel);
    errno = saved;
    return result;
}

/* A two-path operation (rename, link): logged when both paths are under the root. */
static int two_paths(const char *op, int fd1, const char *p1, int fd2, const char *p2, int result_of_call(void *), void *ctx) {
    char *a = relative(fd1, p1), *b = relative(fd2, p2);
    if (a || b) pthread_mutex_lock(&lock);
    int result = result_of_call(ctx);
    int saved = errno;
    if (result == 0 && a && b) record(op, a, b, NULL, 0);
    if (a || b) pthread_mutex_unlock(&lock);
    free(a);
    free(b);
    errno = saved;
    return result;
}

struct rename_args { int fd1; const char *p1; int fd2; const char *p2; unsigned flags; int kind; };
static int call_rename(void *ctx) {
    struct rename_args *r = ctx;
    switch (r->kind) {
    case 0: return real_rename(r->p1, r->p2);
    case 1: return real_renameat(r->fd1, r->p1, r->fd2, r->p2);
    case 2: return real_renameat2(r->fd1, r->p1, r->fd2, r->p2, r->flags);
    default: return real_link(r->p1, r->p2);
    }
}
int rename(const char *from, const char *to) {
    struct rename_args r = {AT_FDCWD, from, AT_FDCWD, to, 0, 0};
    return two_paths("rename", AT_FDCWD, from, AT_FDCWD, to, call_rename, &r);
}
int renameat(int fd1, const char *from, int fd2, const char *to) {
    struct rename_args r = {fd1, from, fd2, to, 0, 1};
    return two_paths("rename", fd1, from, fd2, to, call_rename, &r);
}
int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags) {
    struct rename_args r = {fd1, from, fd2, to, flags, 2};
    return two_paths("rename", fd1, from, fd2, to, call_rename, &r);
}
int link(const char *from, const char *to) {
    struct rename_args r = {AT_FDCWD, from, AT_FDCWD, to, 0, 3};
    return two_paths("link", AT_FDCWD, from, AT_FDCWD, to, call_rename, &r);
}

static int one_path(const char *op, int dirfd, const char *path, int (*call)(int, const char *, int, mode_t), int flags, mode_t mode) {
    char *rel = relative(dirfd, path);
    if (rel) pthread_mutex_lock(&lock);
    int result = call(dirfd, path, flags, mode);
    int saved = errno;
    if (rel) {
        struct stat st;
        unsigned long long ino = (result == 0 && strcmp(op, "mkdir") == 0 && fstatat(dirfd, path, &st, 0) == 0) ? (unsigned long long)st.st_ino : 0;
        if (result == 0) record_ino(op, ino, rel, NULL, NULL, 0);
        pthread_mutex_unlock(&lock);
        free(rel);
    }
    errno = saved;
    return result;
}
static int call_unlinkat(int dirfd, const char *path, int flags, mode_t mode) { (void)mode; return real_unlinkat(dirfd, path, flags); }
static int call_unlink(int dirfd, const char *path, int flags, mode_t mode) { (void)dirfd; (void)flags; (void)mode; return real_unlink(path); }
static int call_rmdir(int dirfd, const char *path, int flags, mode_t mode) { (void)dirfd; (void)flags; (void)mode; return real_rmdir(path); }
static int call_mkdir(int dirfd, const char *path, int flags, mode_t mode) { (void)dirfd; (void)flags; return real_mkdir(path, mode); }
static int call_mkdirat(int dirfd, const char *path, int flags, mode_t mode) { (void)flags; return real_mkdirat(dirfd, path, mode); }

int unlink(const char *path) { return one_path("unlink", AT_FDCWD, path, call_unlink, 0, 0); }
int unlinkat(int dirfd, const char *path, int flags) {
    return one_path((flags & AT_REMOVEDIR) ? "rmdir" : "unlink", dirfd, path, call_unlinkat, flags, 0);
}
int rmdir(const char *path) { return one_path("rmdir", AT_FDCWD, path, call_rmdir, 0, 0); }
int mkdir(const char *path, mode_t mode) { return one_path("mkdir", AT_FDCWD, path, call_mkdir, 0, mode); }
int mkdirat(int dirfd, const char *path, mode_t mode) { return one_path("mkdir", dirfd, path, call_mkdirat, 0, mode); }
