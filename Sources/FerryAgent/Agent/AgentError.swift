/// An error from the agent core: configuration, sockets, consent files, requests or delivery.
/// Failures of the durable log and its files are `StorageError`s (FerryStorage).
///
/// One error type for the module, shaped like swift-nio's `FileSystemError`: a stable ``code`` to
/// branch on, a message for people, an optional errno and the underlying cause.
public struct AgentError: Error, CustomStringConvertible, Sendable {
    /// Stable error categories; new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// A system call on a file failed (see ``AgentError/errno``).
        public static let io = Code("io")
        /// The disk (or the filesystem quota) is full.
        public static let noSpace = Code("no_space")
        /// A data file is not in the expected format.
        public static let corrupt = Code("corrupt")
        /// The configuration is invalid.
        public static let configuration = Code("configuration")
        /// A ZeroMQ call failed.
        public static let socket = Code("socket")
        /// A directory or file the agent would use is unsafe (a symbolic link, owned by another
        /// user, writable by others); the message names the path, its owner and the fix.
        public static let unsafePath = Code("unsafe_path")
        /// The agent is already running in this runtime directory.
        public static let alreadyRunning = Code("already_running")
        /// A sink failed to deliver.
        public static let delivery = Code("delivery")
        /// A request (on the control socket) named something that does not exist or is not allowed.
        public static let invalidRequest = Code("invalid_request")
        public var description: String { name }
    }

    /// What went wrong, as a category.
    public var code: Code
    /// What went wrong, for people.
    public var message: String
    /// The errno of the failed system call, if any.
    public var errno: CInt?
    /// The underlying error, if any.
    public var cause: (any Error & Sendable)?
    /// For an invalid value: the values that would have been accepted.
    public var valid: [String] = []

    /// Creates an error.
    public init(code: Code, message: String, valid: [String] = [], errno: CInt? = nil, cause: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.valid = valid
        self.errno = errno
        self.cause = cause
    }

    public var description: String {
        var text = "\(code): \(message)"
        // A cause that only repeats the message (a storage error passed on with its words) is not
        // said twice.
        if let cause, !"\(cause)".contains(message) { text += " (\(cause))" }
        return text
    }
}
