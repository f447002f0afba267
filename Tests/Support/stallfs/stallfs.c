/*
 * stallfs: a FUSE passthrough of a backing directory whose file operations can be made to
 * block in the kernel/filesystem path, for tests that need a real I/O stall.
 *
 *   stallfs BACKING_DIR MOUNTPOINT [extra FUSE options]
 *
 * Runs in the foreground, multithreaded. Control by signal:
 *   SIGUSR1  stall: every operation except getattr("/"), statfs and release blocks
 *   SIGUSR2  resume: blocked operations continue, new ones pass
 *   SIGTERM/SIGINT  unmount and exit (libfuse's handlers)
 * The signals are taken by a sigwait thread (blocked everywhere else), never by a handler.
 *
 * Events go to standard error, one line each, so a test can wait on them instead of a clock:
 *   stallfs: ready backing=DIR
 *   stallfs: stalled n=N            (N-th stall/resume signal handled)
 *   stallfs: resumed n=N
 *   stallfs: blocked id=I op=OP path=PATH     (an operation is now waiting)
 *   stallfs: released id=I op=OP path=PATH    (it continues)
 * PATH is last on the line and may contain spaces.
 *
 * Build: cc -o stallfs stallfs.c $(pkg-config --cflags --libs fuse3)
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <fuse.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int backing_fd = -1;
static const char *backing_path;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t resumed = PTHREAD_COND_INITIALIZER;
static int stalled;
static unsigned long signals_handled, next_block_id;

/* One event line to stderr with a single write(2); call with `lock` held or before threads. */
static void event(const char *format, ...) {
    char line[4096];
    int n = snprintf(line, sizeof line, "stallfs: ");
    va_list args;
    va_start(args, format);
    n += vsnprintf(line + n, sizeof line - n - 1, format, args);
    va_end(args);
    if (n > (int)sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, n);
    (void)ignored;
}

/* Blocks while stalled. Every operation that touches the filesystem passes through here. */
static void gate(const char *op, const char *path) {
    pthread_mutex_lock(&lock);
    if (stalled) {
        unsigned long id = ++next_block_id;
        event("blocked id=%lu op=%s path=%s", id, op, path);
        while (stalled) pthread_cond_wait(&resumed, &lock);
        event("released id=%lu op=%s path=%s", id, op, path);
    }
    pthread_mutex_unlock(&lock);
}

static void *signal_thread(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0) continue;
        pthread_mutex_lock(&lock);
        signals_handled++;
        stalled = (sig == SIGUSR1);
        if (!stalled) pthread_cond_broadcast(&resumed);
        event("%s n=%lu", stalled ? "stalled" : "resumed", signals_handled);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

/* "/a/b" -> "a/b" relative to backing_fd; "/" -> ".". */
static const char *rel(const char *path) {
    while (*path == '/') path++;
    return *path ? path : ".";
}

#define RET(expr) return (expr) == -1 ? -errno : 0

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    cfg->hard_remove = 1;      /* no .fuse_hidden files in the backing directory */
    cfg->entry_timeout = 0;    /* every lookup reaches us, so a stall is felt at once */
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    pthread_mutex_lock(&lock);
    event("ready backing=%s", backing_path);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    if (strcmp(path, "/") != 0) gate("getattr", path);
    if (fi) RET(fstat(fi->fh, st));
    RET(fstatat(backing_fd, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t offset,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)offset; (void)fi; (void)flags;
    gate("readdir", path);
    int fd = openat(backing_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd == -1) return -errno;
    DIR *dir = fdopendir(fd);
    if (!dir) { int e = errno; close(fd); return -e; }
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        struct stat st = {.st_ino = entry->d_ino, .st_mode = (mode_t)entry->d_type << 12};
        if (filler(buf, entry->d_name, &st, 0, 0)) break;
    }
    closedir(dir);
    return 0;
}

static int op_mkdir(const char *path, mode_t mode) { gate("mkdir", path); RET(mkdirat(backing_fd, rel(path), mode)); }
static int op_rmdir(const char *path) { gate("rmdir", path); RET(unlinkat(backing_fd, rel(path), AT_REMOVEDIR)); }
static int op_unlink(const char *path) { gate("unlink", path); RET(unlinkat(backing_fd, rel(path), 0)); }

static int op_rename(const char *from, const char *to, unsigned int flags) {
    gate("rename", from);
    RET(renameat2(backing_fd, rel(from), backing_fd, rel(to), flags));
}

static int op_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    gate("chmod", path);
    if (fi) RET(fchmod(fi->fh, mode));
    RET(fchmodat(backing_fd, rel(path), mode, 0));
}

static int op_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
    gate("chown", path);
    if (fi) RET(fchown(fi->fh, uid, gid));
    RET(fchownat(backing_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    gate("truncate", path);
    if (fi) RET(ftruncate(fi->fh, size));
    int fd = openat(backing_fd, rel(path), O_WRONLY | O_CLOEXEC);
    if (fd == -1) return -errno;
    int result = ftruncate(fd, size) == -1 ? -errno : 0;
    close(fd);
    return result;
}

static int op_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    gate("utimens", path);
    if (fi) RET(futimens(fi->fh, tv));
    RET(utimensat(backing_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

static int op_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    gate("create", path);
    int fd = openat(backing_fd, rel(path), fi->flags | O_CREAT | O_CLOEXEC, mode);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi) {
    gate("open", path);
    int fd = openat(backing_fd, rel(path), fi->flags | O_CLOEXEC);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t offset, struct fuse_file_info *fi) {
    gate("read", path);
    ssize_t n = pread(fi->fh, buf, size, offset);
    return n == -1 ? -errno : (int)n;
}

static int op_write(const char *path, const char *buf, size_t size, off_t offset, struct fuse_file_info *fi) {
    gate("write", path);
    ssize_t n = pwrite(fi->fh, buf, size, offset);
    return n == -1 ? -errno : (int)n;
}

static int op_statfs(const char *path, struct statvfs *st) { (void)path; RET(fstatvfs(backing_fd, st)); }

static int op_flush(const char *path, struct fuse_file_info *fi) {
    gate("flush", path);
    RET(close(dup(fi->fh)));
}

static int op_release(const char *path, struct fuse_file_info *fi) {
    (void)path;  /* never blocks: the kernel sends it after close(2) returned */
    close(fi->fh);
    return 0;
}

static int op_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    gate("fsync", path);
    RET(datasync ? fdatasync(fi->fh) : fsync(fi->fh));
}

static int op_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)fi;
    gate("fsyncdir", path);
    int fd = openat(backing_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd == -1) return -errno;
    int result = (datasync ? fdatasync(fd) : fsync(fd)) == -1 ? -errno : 0;
    close(fd);
    return result;
}

static const struct fuse_operations operations = {
    .init = op_init, .getattr = op_getattr, .readdir = op_readdir, .mkdir = op_mkdir,
    .rmdir = op_rmdir, .unlink = op_unlink, .rename = op_rename, .chmod = op_chmod,
    .chown = op_chown, .truncate = op_truncate, .utimens = op_utimens, .create = op_create,
    .open = op_open, .read = op_read, .write = op_write, .statfs = op_statfs,
    .flush = op_flush, .release = op_release, .fsync = op_fsync, .fsyncdir = op_fsyncdir,
};

int main(int argc, char *argv[]) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s BACKING_DIR MOUNTPOINT [FUSE options]\n", argv[0]);
        return 2;
    }
    backing_path = argv[1];
    backing_fd = open(backing_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (backing_fd == -1) {
        fprintf(stderr, "stallfs: cannot open %s: %s\n", backing_path, strerror(errno));
        return 1;
    }
    /* Block SIGUSR1/2 before any thread exists, so only the sigwait thread ever takes them. */
    static sigset_t control;
    sigemptyset(&control);
    sigaddset(&control, SIGUSR1);
    sigaddset(&control, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &control, NULL);
    pthread_t thread;
    if (pthread_create(&thread, NULL, signal_thread, &control) != 0) {
        fprintf(stderr, "stallfs: cannot start the signal thread\n");
        return 1;
    }
    pthread_detach(thread);

    char **args = calloc(argc + 4, sizeof *args);
    int n = 0;
    args[n++] = argv[0];
    args[n++] = "-f";
    args[n++] = "-o";
    args[n++] = "fsname=stallfs,subtype=stallfs";
    for (int i = 2; i < argc; i++) args[n++] = argv[i];
    return fuse_main(n, args, &operations, NULL);
}
