#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The module's only file I/O: reading a plan and the HMAC key file (the `load` functions).
enum FileAccess {
    /// The whole file at `path`.
    static func read(_ path: String) throws(QualityError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .unreadable(file: path, reason: String(cString: strerror(errno))) }
        defer { close(descriptor) }
        return try readAll(descriptor, path: path)
    }

    /// The key file at `path`, checked: a regular file (not a symlink), owned by root or the
    /// effective user, without group or other permissions to read, at least ``minimumKeyBytes``.
    static func readKey(_ path: String) throws(QualityError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else {
            let code = errno
            if code == ELOOP { throw .keyFile(path: path, message: "is a symbolic link; name the key file itself") }
            throw .keyFile(path: path, message: "cannot open: \(String(cString: strerror(code)))")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw .keyFile(path: path, message: "cannot stat: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .keyFile(path: path, message: "is not a regular file") }
        guard info.st_uid == 0 || info.st_uid == geteuid() else {
            throw .keyFile(path: path, message: "is owned by uid \(info.st_uid); it must be owned by root or uid \(geteuid()) (ferryd's user)")
        }
        guard info.st_mode & (S_IRWXG | S_IRWXO) == 0 else {
            throw .keyFile(path: path, message: "has mode \(String(info.st_mode & 0o777, radix: 8)); group and others must have no access (chmod 600)")
        }
        let key = try readAll(descriptor, path: path)
        guard key.count >= minimumKeyBytes else {
            throw .keyFile(path: path, message: "holds \(key.count) bytes; a key needs at least \(minimumKeyBytes) (head -c 32 /dev/urandom)")
        }
        return key
    }

    /// The shortest HMAC key accepted (the SHA-256 output size, RFC 2104's recommendation).
    static let minimumKeyBytes = 32

    private static func readAll(_ descriptor: CInt, path: String) throws(QualityError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(file: path, reason: String(cString: strerror(errno)))
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[..<count])
        }
    }
}
