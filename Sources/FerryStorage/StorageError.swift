#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from Ferry's on-disk storage: a failed system call on a file, a full disk, or a file
/// that is not in the expected format.
///
/// One error type for the module, shaped like swift-nio's `FileSystemError`: a stable ``code`` to
/// branch on, a message for people naming the path, and the errno of the failed call.
public struct StorageError: Error, CustomStringConvertible, Sendable {
    /// Stable error categories; new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// A system call on a file failed (see ``StorageError/errno``).
        public static let io = Code("io")
        /// The disk (or the filesystem quota) is full.
        public static let noSpace = Code("no_space")
        /// A data file is not in the expected format.
        public static let corrupt = Code("corrupt")
        /// A directory or file the agent would use is unsafe: a symbolic link, owned by another
        /// user, or writable by others (see ``PathSafety``). The message names the path, its
        /// owner and the fix.
        public static let unsafePath = Code("unsafe_path")
        public var description: String { name }
    }

    /// What went wrong, as a category.
    public var code: Code
    /// What went wrong, for people.
    public var message: String
    /// The errno of the failed system call, if any.
    public var errno: CInt?

    /// Creates an error.
    public init(code: Code, message: String, errno: CInt? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
    }

    /// An error for a failed system call; `ENOSPC`/`EDQUOT` map to ``Code/noSpace``.
    package static func system(_ operation: String, path: String, errno: CInt) -> StorageError {
        let code: Code = (errno == ENOSPC || errno == EDQUOT) ? .noSpace : .io
        return StorageError(code: code, message: "\(operation) \(path): \(String(cString: strerror(errno)))", errno: errno)
    }

    public var description: String { "\(code): \(message)" }
}
