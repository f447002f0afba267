#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The rules for the directories and files the agent uses, so that no other user can swap a
/// socket, a queue file or a directory under it.
///
/// For the agent's own directories (runtime, data, sink output, and everything it creates in
/// them):
/// - the directory itself must be a real directory (not a symbolic link, checked with `lstat`),
///   owned by the agent's effective uid, and not writable by group or others; a missing one is
///   created with the intended mode, an existing safe one is set to that mode;
/// - every ancestor must be owned by root or by the agent's uid and not writable by group or
///   others unless it has the sticky bit (`/tmp` is fine: others cannot rename what they do not
///   own in it). An ancestor may be a symbolic link (`/var/run` → `/run`) owned by root or the
///   agent; the directory it leads to is then checked the same way;
/// - inside them (``checkContents(of:)``, before the agent touches anything): no symbolic link,
///   nothing owned by another uid, no file or directory writable by group or others.
///
/// This is OpenSSH's rule for `authorized_keys` paths (`safe_path`), plus the sticky exception.
/// Files are opened with `O_NOFOLLOW` (``FileIO/open(_:_:mode:followSymlinks:)``).
package enum PathSafety {
    /// The uid whose files the agent may use.
    package static var agentUID: uid_t { geteuid() }

    /// Creates `path` (and missing parents) with `mode`, or checks the existing directory and
    /// sets its mode. Throws ``StorageError/Code/unsafePath`` naming the path, owner and fix.
    package static func prepareDirectory(_ path: String, mode: mode_t) throws {
        try walk(path, mode: mode, create: true)
    }

    /// The same checks as ``prepareDirectory(_:mode:)`` without creating or changing anything:
    /// components that do not exist yet are fine.
    package static func checkDirectory(_ path: String) throws {
        try walk(path, mode: 0, create: false)
    }

    /// Checks everything below `directory` (not following links): no symbolic links, nothing
    /// owned by another uid, no file or directory writable by group or others (sockets may be:
    /// their modes are set explicitly at bind). A missing directory passes.
    package static func checkContents(of directory: String) throws {
        guard let names = try? FileIO.listDirectory(directory) else { return }
        for name in names {
            let path = directory + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            let type = st.st_mode & S_IFMT
            if type == S_IFLNK { throw symlinkError(path, st) }
            if st.st_uid != agentUID { throw foreignOwnerError(path, st, what: type == S_IFDIR ? "directory" : "file") }
            if type != S_IFSOCK && st.st_mode & (S_IWGRP | S_IWOTH) != 0 {
                throw writableError(path, st, what: type == S_IFDIR ? "directory" : "file")
            }
            if type == S_IFDIR { try checkContents(of: path) }
        }
    }

    /// The refusal for `path` if it is a symbolic link, else `nil`.
    package static func symlinkRefusal(_ path: String) -> StorageError? {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFLNK else { return nil }
        return symlinkError(path, st)
    }

    // MARK: The walk

    private static func walk(_ path: String, mode: mode_t, create: Bool) throws {
        let absolute = path.hasPrefix("/") ? path : currentDirectory() + "/" + path
        let components = absolute.split(separator: "/").map(String.init).filter { $0 != "." }
        guard !components.isEmpty else { return }
        var current = ""
        var throughLink = false
        for (index, component) in components.enumerated() {
            let parent = current.isEmpty ? "/" : current
            current += "/" + component
            let isLast = index == components.count - 1
            var st = stat()
            if lstat(current, &st) != 0 {
                let code = errno
                guard code == ENOENT else { throw StorageError.system("lstat", path: current, errno: code) }
                guard create else { return }
                if mkdir(current, mode) == 0 {
                    // A new directory is durable only once its parent is synced: a power cut
                    // must not take away a directory whose files were synced (FAULTS.md § 8).
                    try FileIO.syncDirectory(parent)
                } else if errno != EEXIST {
                    throw StorageError.system("mkdir", path: current, errno: errno)
                }
                guard lstat(current, &st) == 0 else { throw StorageError.system("lstat", path: current, errno: errno) }
            }
            let type = st.st_mode & S_IFMT
            if isLast {
                if type == S_IFLNK { throw symlinkError(current, st) }
                guard type == S_IFDIR else { throw notDirectoryError(current, st) }
                if st.st_uid != agentUID { throw foreignOwnerError(current, st, what: "directory") }
                if st.st_mode & (S_IWGRP | S_IWOTH) != 0 { throw writableError(current, st, what: "directory") }
                if create && st.st_mode & 0o7777 != mode && chmod(current, mode) != 0 {
                    throw StorageError.system("chmod", path: current, errno: errno)
                }
            } else {
                if type == S_IFLNK {
                    guard st.st_uid == 0 || st.st_uid == agentUID else { throw ancestorError(current, st, of: absolute) }
                    throughLink = true
                    continue
                }
                guard type == S_IFDIR else { throw notDirectoryError(current, st) }
                try checkAncestor(current, st, of: absolute)
            }
        }
        // A link on the way: the directories it leads through must pass the same rule.
        if throughLink, let resolved = realPath(FileIO.parent(of: absolute)) {
            var current = ""
            for component in resolved.split(separator: "/") {
                current += "/" + component
                var st = stat()
                guard lstat(current, &st) == 0 else { throw StorageError.system("lstat", path: current, errno: errno) }
                try checkAncestor(current, st, of: absolute)
            }
        }
    }

    private static func checkAncestor(_ path: String, _ st: stat, of target: String) throws {
        let owned = st.st_uid == 0 || st.st_uid == agentUID
        let writable = st.st_mode & (S_IWGRP | S_IWOTH) != 0 && st.st_mode & S_ISVTX == 0
        if !owned || writable { throw ancestorError(path, st, of: target) }
    }

    // MARK: Messages: the path, its owner and the fix

    /// `uid 1001 (mallory)`.
    package static func describeUser(_ uid: uid_t) -> String {
        var entry = passwd(), result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        if getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, let result, let name = result.pointee.pw_name {
            return "uid \(uid) (\(String(cString: name)))"
        }
        return "uid \(uid)"
    }

    private static func octal(_ mode: mode_t) -> String {
        let text = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - text.count)) + text
    }

    private static func refusal(_ message: String) -> StorageError {
        StorageError(code: .unsafePath, message: message)
    }

    private static func symlinkError(_ path: String, _ st: stat) -> StorageError {
        let target = readLink(path).map { " to \($0)" } ?? ""
        return refusal("refusing \(path): it is a symbolic link\(target), owned by \(describeUser(st.st_uid)); ferryd does not follow links in its directories. Fix: remove the link (rm \(path)) and give the real path, or let ferryd create it")
    }

    private static func foreignOwnerError(_ path: String, _ st: stat, what: String) -> StorageError {
        refusal("refusing \(path): the \(what) is owned by \(describeUser(st.st_uid)), not by \(describeUser(agentUID)) that ferryd runs as; that user could replace what ferryd keeps there. Fix: remove it (rm -r \(path)) so ferryd creates it, or chown -R \(agentUID) \(path) if its contents are trusted")
    }

    private static func writableError(_ path: String, _ st: stat, what: String) -> StorageError {
        refusal("refusing \(path): the \(what) has mode \(octal(st.st_mode)), writable by other users (owner \(describeUser(st.st_uid))). Fix: chmod go-w \(path)")
    }

    private static func notDirectoryError(_ path: String, _ st: stat) -> StorageError {
        refusal("refusing \(path): it is not a directory (owner \(describeUser(st.st_uid))). Fix: move it away or choose another path")
    }

    private static func ancestorError(_ path: String, _ st: stat, of target: String) -> StorageError {
        refusal("refusing \(target): its parent \(path) (mode \(octal(st.st_mode)), owner \(describeUser(st.st_uid))) lets another user replace it; every parent must be owned by root or \(describeUser(agentUID)) and not writable by others unless sticky. Fix: chmod go-w \(path) (or chmod +t), or choose a directory elsewhere")
    }

    // MARK: Helpers

    private static func currentDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    private static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
