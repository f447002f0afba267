#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin POSIX file helpers. Every call retries `EINTR` and throws ``StorageError`` with the path;
/// nothing here is called from the Swift concurrency pool (see ``BlockingExecutor``).
package enum FileIO {
    @inline(__always)
    package static func call<T: BinaryInteger>(_ operation: String, _ path: String, _ body: () -> T) throws -> T {
        while true {
            let result = body()
            if result >= 0 { return result }
            let code = errno
            if code == EINTR { continue }
            throw StorageError.system(operation, path: path, errno: code)
        }
    }

    /// Opens `path` with `O_CLOEXEC` and, unless `followSymlinks`, `O_NOFOLLOW`: a symbolic link
    /// in the last component is refused with ``StorageError/Code/unsafePath`` (naming its owner
    /// and the fix) instead of being followed. Only files the operator names outside the agent's
    /// directories (the configuration file, token files) follow links.
    package static func open(_ path: String, _ flags: CInt, mode: mode_t = 0o600, followSymlinks: Bool = false) throws -> CInt {
        do {
            return try call("open", path) { Glibc.open(path, flags | O_CLOEXEC | (followSymlinks ? 0 : O_NOFOLLOW), mode) }
        } catch let error as StorageError where error.errno == ELOOP && !followSymlinks {
            throw PathSafety.symlinkRefusal(path) ?? error
        }
    }

    /// Writes all of `bytes` at `offset`, looping over short writes.
    package static func pwriteAll(_ fd: CInt, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = try call("write", path) {
                pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            if n == 0 { throw StorageError(code: .io, message: "write \(path): wrote 0 bytes") }
            done += n
        }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    package static func pread(_ fd: CInt, count: Int, at offset: Int64, path: String) throws -> [UInt8] {
        // Uninitialised: zero-filling a 1 MiB delivery read first cost more than parsing it.
        try [UInt8](unsafeUninitializedCapacity: count) { raw, initialized in
            var done = 0
            defer { initialized = done }
            while done < count {
                let n = try call("read", path) {
                    Glibc.pread(fd, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
                }
                if n == 0 { break }
                done += n
            }
        }
    }

    package static func fdatasync(_ fd: CInt, path: String) throws {
        #if canImport(Darwin)
        _ = try call("fcntl(F_FULLFSYNC)", path) { fcntl(fd, F_FULLFSYNC) }
        #else
        _ = try call("fdatasync", path) { Glibc.fdatasync(fd) }
        #endif
    }

    package static func fsync(_ fd: CInt, path: String) throws {
        _ = try call("fsync", path) { Glibc.fsync(fd) }
    }

    package static func ftruncate(_ fd: CInt, _ length: Int64, path: String) throws {
        _ = try call("ftruncate", path) { Glibc.ftruncate(fd, off_t(length)) }
    }

    package static func fileSize(_ fd: CInt, path: String) throws -> Int64 {
        var st = stat()
        _ = try call("fstat", path) { fstat(fd, &st) }
        return Int64(st.st_size)
    }

    /// fsyncs a directory so that a create, rename or unlink in it is durable.
    package static func syncDirectory(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY, followSymlinks: true)
        defer { Glibc.close(fd) }
        try fsync(fd, path: path)
    }

    /// Prepares a directory the agent owns (see ``PathSafety/prepareDirectory(_:mode:)``): missing
    /// components are created with `mode`; an existing directory is used (and set to `mode`)
    /// only if it is safe, otherwise ``StorageError/Code/unsafePath`` names the path, its owner
    /// and the fix. Each directory it creates is made durable by an fsync of its parent.
    package static func makeDirectory(_ path: String, mode: mode_t) throws {
        try PathSafety.prepareDirectory(path, mode: mode)
    }

    /// Appends `bytes` to the file at `path` (created 0600 if missing) and `fdatasync`s it; a file
    /// it creates is made durable by an fsync of its directory too.
    package static func appendDurably(_ bytes: [UInt8], to path: String) throws {
        let (fd, created) = try openCreating(path, O_WRONLY)
        defer { close(fd) }
        let size = try fileSize(fd, path: path)
        try bytes.withUnsafeBytes { try pwriteAll(fd, $0, at: size, path: path) }
        try fdatasync(fd, path: path)
        if created { try syncDirectory(parent(of: path)) }
    }

    /// Opens `path` with `O_CREAT` added to `flags`; says whether this call created it.
    package static func openCreating(_ path: String, _ flags: CInt, mode: mode_t = 0o600) throws -> (fd: CInt, created: Bool) {
        while true {
            let fd = Glibc.open(path, flags | O_CREAT | O_EXCL | O_CLOEXEC, mode)
            if fd >= 0 { return (fd, true) }
            if errno == EINTR { continue }
            guard errno == EEXIST else { throw StorageError.system("open", path: path, errno: errno) }
            do {
                return (try open(path, flags), false)
            } catch let error as StorageError where error.errno == ENOENT {
                continue  // removed in between: create it after all
            }
        }
    }

    /// Atomically replaces `path` with `bytes`: temp file, fsync, rename, fsync of the directory.
    /// Neither the temp file nor `path` may be a symbolic link (`rename` would replace a link
    /// rather than follow it, but a link where the agent keeps its own file means someone
    /// tampered with the directory: it is refused, not silently replaced).
    package static func writeAtomically(_ bytes: [UInt8], to path: String) throws {
        let temporary = path + ".tmp"
        if let refusal = PathSafety.symlinkRefusal(path) { throw refusal }
        let fd = try open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try bytes.withUnsafeBytes { raw in try pwriteAll(fd, raw, at: 0, path: temporary) }
            if PlantedBug.active == .renameBeforeFsync {
                _ = try call("rename", path) { rename(temporary, path) }
                try syncDirectory(parent(of: path))
            }
            try fsync(fd, path: temporary)
        } catch {
            Glibc.close(fd)
            throw error
        }
        Glibc.close(fd)
        if PlantedBug.active == .renameBeforeFsync { return }
        _ = try call("rename", path) { rename(temporary, path) }
        try syncDirectory(parent(of: path))
    }

    /// Reads a whole file, or returns `nil` if it does not exist. A symbolic link is refused
    /// unless `followSymlinks` (for files the operator names: configuration, tokens).
    package static func readFile(_ path: String, followSymlinks: Bool = false) throws -> [UInt8]? {
        let fd: CInt
        do {
            fd = try open(path, O_RDONLY, followSymlinks: followSymlinks)
        } catch let error as StorageError where error.errno == ENOENT {
            return nil
        }
        defer { Glibc.close(fd) }
        let size = try fileSize(fd, path: path)
        return try pread(fd, count: Int(size), at: 0, path: path)
    }

    /// Names in a directory (without `.` and `..`), or `[]` if it does not exist.
    package static func listDirectory(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else {
            if errno == ENOENT { return [] }
            throw StorageError.system("opendir", path: path, errno: errno)
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    package static func unlink(_ path: String) throws {
        if Glibc.unlink(path) != 0 && errno != ENOENT { throw StorageError.system("unlink", path: path, errno: errno) }
    }

    package static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
