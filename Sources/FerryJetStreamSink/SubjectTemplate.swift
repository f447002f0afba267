/// A NATS subject with placeholders, e.g. `ferry.events.{category}.{type}`.
///
/// Placeholders: `{type}` (track, identify, …), `{category}` (the category number),
/// `{source}` (the emitting app) and `{user}` (the event's user id, written losslessly by
/// ``userToken(_:)``, so that `ferry forget --user` can purge exactly that user's subjects). A placeholder's value is sanitised into a safe subject token:
/// ASCII letters, digits, `-` and `_` are kept, every other character (`.`, `*`, `>`, spaces,
/// control and non-ASCII characters) becomes `_`, and an empty value becomes `_`. So a rendered
/// subject always has the template's number of tokens and never contains a wildcard.
public struct SubjectTemplate: Sendable, Hashable {
    /// A template that cannot be used.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        /// Why.
        public var message: String
        public var description: String { message }
    }

    /// What a placeholder stands for.
    public enum Placeholder: String, Sendable, Hashable, CaseIterable {
        case type, category, source, user
    }

    enum Piece: Sendable, Hashable {
        case literal(String)
        case placeholder(Placeholder)
    }

    /// The template's tokens (split at `.`), each a sequence of literal text and placeholders.
    let tokens: [[Piece]]
    /// The template as written.
    public let text: String

    /// Parses `text`; throws ``Invalid`` for an empty token, an unknown or unclosed placeholder,
    /// or a literal that is not a valid publish-subject token (wildcards, whitespace).
    public init(_ text: String) throws(Invalid) {
        self.text = text
        guard !text.isEmpty else { throw Invalid(message: "the subject template is empty") }
        var tokens: [[Piece]] = []
        for token in text.split(separator: ".", omittingEmptySubsequences: false) {
            guard !token.isEmpty else { throw Invalid(message: "\"\(text)\" has an empty token") }
            var pieces: [Piece] = []
            var rest = Substring(token)
            while !rest.isEmpty {
                if rest.first == "{" {
                    guard let close = rest.firstIndex(of: "}") else {
                        throw Invalid(message: "\"\(text)\" has an unclosed placeholder")
                    }
                    let name = String(rest[rest.index(after: rest.startIndex)..<close])
                    guard let placeholder = Placeholder(rawValue: name) else {
                        throw Invalid(message: "unknown placeholder {\(name)}; valid: {type}, {category}, {source}, {user}")
                    }
                    pieces.append(.placeholder(placeholder))
                    rest = rest[rest.index(after: close)...]
                } else {
                    let end = rest.firstIndex(of: "{") ?? rest.endIndex
                    let literal = String(rest[..<end])
                    if let bad = literal.first(where: { $0 == "*" || $0 == ">" || $0 == "}" || $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true }) {
                        throw Invalid(message: "\"\(text)\" contains \"\(bad)\", which a subject cannot contain")
                    }
                    pieces.append(.literal(literal))
                    rest = rest[end...]
                }
            }
            if pieces.contains(.placeholder(.user)), pieces.count > 1 {
                throw Invalid(message: "\"\(text)\": {user} must be a whole token (such as ferry.users.{user}.{type})")
            }
            tokens.append(pieces)
        }
        self.tokens = tokens
    }

    /// The subject for one event.
    public func render(type: String, category: UInt8, source: String, user: String = "") -> String {
        tokens.map { pieces in
            pieces.map { piece in
                switch piece {
                case .literal(let text): text
                case .placeholder(.type): Self.sanitize(type)
                case .placeholder(.category): String(category)
                case .placeholder(.source): Self.sanitize(source)
                case .placeholder(.user): Self.userToken(user)
                }
            }.joined()
        }.joined(separator: ".")
    }

    /// Whether the template has a `{user}` placeholder.
    public var carriesUser: Bool { tokens.contains { $0.contains(.placeholder(.user)) } }

    /// The stream filter of every subject rendered for `user` (`nil` without `{user}`): the
    /// user's token where the template has it, `*` for every other token holding a placeholder.
    public func userFilter(_ user: String) -> String? {
        guard carriesUser else { return nil }
        return tokens.map { pieces in
            if pieces.contains(.placeholder(.user)), pieces.count == 1 { return Self.userToken(user) }
            if pieces.allSatisfy({ if case .literal = $0 { true } else { false } }) {
                return pieces.map { if case .literal(let text) = $0 { text } else { "" } }.joined()
            }
            return "*"
        }.joined(separator: ".")
    }

    /// A user id as one subject token, losslessly (unlike ``sanitize(_:)``, two ids never share a
    /// token, so a purge by subject reaches exactly one user): ASCII letters, digits and `-` are
    /// kept, every other byte of its UTF-8 becomes `_` and two upper-case hex digits (`a.b` →
    /// `a_2Eb`, `_` → `_5F`); an empty id (an event without a user) becomes `_`.
    public static func userToken(_ user: String) -> String {
        guard !user.isEmpty else { return "_" }
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in user.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "_"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `value` as a safe subject token (see the type's documentation).
    public static func sanitize(_ value: String) -> String {
        guard !value.isEmpty else { return "_" }
        var out = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            let keep = scalar.isASCII && (("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
                || ("0"..."9").contains(scalar) || scalar == "-" || scalar == "_")
            out.append(keep ? scalar : "_")
        }
        return String(out)
    }

    /// A subject shaped like the rendered ones (placeholders as `_`), for messages.
    var sampleSubject: String { render(type: "", category: 0, source: "") }

    /// Whether the stream subject `filter` captures every subject this template can render.
    func isCovered(by filter: String) -> Bool {
        let parts = filter.split(separator: ".", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            if part == ">" { return index < tokens.count }
            guard index < tokens.count else { return false }
            if part == "*" { continue }
            guard case .literal(let literal) = tokens[index].first, tokens[index].count == 1, literal == part else {
                return false
            }
        }
        return parts.count == tokens.count
    }

    /// Whether `filter` is a valid stream subject (non-empty tokens; `*` and `>` only as whole
    /// tokens, `>` only last).
    static func isValidFilter(_ filter: String) -> Bool {
        let parts = filter.split(separator: ".", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            guard !part.isEmpty, !part.contains(where: \.isWhitespace) else { return false }
            if part == ">" { if index != parts.count - 1 { return false } else { continue } }
            if part != "*" && (part.contains("*") || part.contains(">")) { return false }
        }
        return true
    }
}
