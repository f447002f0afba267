import FerryProtocol
@testable import FerryQuality
import Foundation
import Testing

/// The detectors inside text (docs/QUALITY.md, "Inside text"): what they find, what they leave
/// alone (the false-positive rules), URLs read by component, each action, and an independent
/// matcher (`scripts/detector-oracle`, Python) agreeing on generated text.
@Suite struct DetectorsInTextTests {
    /// `text` with each part found replaced by `<kind>` (percent-encoded in a URL component).
    static func marked(_ text: String, noIP: Bool = false) -> String {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { raw in
            let found = Detectors.matches(in: raw, kinds: .all, noIP: noIP)
            return String(decoding: Detectors.rewrite(raw, found) { _, kind in Array("<\(kind.rawValue)>".utf8) }, as: UTF8.self)
        }
    }

    @Test(arguments: [
        ("paid with 4111 1111 1111 1111, thanks", "paid with <card>, thanks"),
        ("card=5555-5555-5555-4444;", "card=<card>;"),
        ("mail jane.doe@example.com.", "mail <email>."),
        ("<jane@example.com>", "<<email>>"),
        ("connect 203.0.113.42:5432 refused", "connect <ip>:5432 refused"),
        ("from 2001:db8::1: timeout", "from <ip>: timeout"),
        ("peer [fe80::1]:80", "peer [<ip>]:80"),
        ("net 10.0.0.0/8", "net <ip>/8"),
        ("call +1 415-555-2671 now", "call <phone> now"),
        ("call (415) 555-2671 or 020 7946 0958", "call <phone> or <phone>"),
        ("tel:+14155552671", "tel:<phone>"),
        ("IBAN DE89 3704 0044 0532 0130 00 please", "IBAN <iban> please"),
        ("to DE89370400440532013000 NOW", "to <iban> NOW"),
        ("4111 1111 1111 1111 12 EUR", "<card> 12 EUR"),
        ("ip=10.0.0.1", "ip=<ip>"),
        ("release 1.2.3.4 crashed", "release <ip> crashed"),
        ("x_y@mail.example.co.uk", "<email>"),
    ])
    func findsInsideText(text: String, expected: String) {
        #expect(Self.marked(text) == expected)
    }

    @Test(arguments: [
        ("https://shop.example/reset?email=jane%40example.com&next=%2F", "https://shop.example/reset?email=%3Cemail%3E&next=%2F"),
        ("https://shop.example/reset?email=jane@example.com&x=1", "https://shop.example/reset?email=<email>&x=1"),
        ("https://x.example/users/jane@example.com/orders", "https://x.example/users/<email>/orders"),
        ("https://x.example/pay/4111111111111111?", "https://x.example/pay/<card>?"),
        ("https://x.example/?phone=%2B14155552671#top", "https://x.example/?phone=%3Cphone%3E#top"),
        ("https://x.example/?q=call+%2B1+415+555+2671", "https://x.example/?q=call+%3Cphone%3E"),
        ("http://10.1.2.3:8080/health", "http://<ip>:8080/health"),
        ("see https://x.example/#access=a&email=bob%40example.org done", "see https://x.example/#access=a&email=%3Cemail%3E done"),
        ("https://x.example/download?version=1.2.3.4", "https://x.example/download?version=1.2.3.4"),
        ("https://x.example/search?q=shoes&page=2", "https://x.example/search?q=shoes&page=2"),
    ])
    func readsURLsByComponent(text: String, expected: String) {
        #expect(Self.marked(text) == expected)
    }

    /// The false-positive rules: each of these is left as it is.
    @Test(arguments: [
        "order 12345678901 shipped", "order #A-1234-5678", "AB-12345",  // order numbers (no Luhn, or not 13 digits)
        "at 1700000000000 ms", "at 2024-05-01T12:00:00Z", "on 2024-05-01 12:00:00", "on 01.05.2024 10:00", "at 12:00:00",  // timestamps
        "id 0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0d", "id 12345678-1234-1234-1234-123456789012",  // UUIDs
        "v1.2.3.4", "release 1.2.3.4.5", "version 1.2.3.4", "Build: 10.0.0.1", "Mozilla/5.0 Chrome/120.0.0.0 Safari/537.36",  // versions
        "4111111111111112 fails Luhn", "ts 1234567812345670",  // not a card
        "x4111111111111111", "4111111111111111x", "user_10.0.0.1",  // glued to a word
        "std::vector<int>", "a::b", "mac 00:1a:2b:3c:4d:5e", "ratio 1:2",  // not IPv6
        "jane@localhost", "@handle", "DE89370400440532013001", "de89370400440532013000",
        "hmac:7f1e0c4b2a9d8e3f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f",
        "pi 3.14159 and 2.71828", "sku 123-456-789", "1.2.3",
    ])
    func leavesAlone(text: String) {
        #expect(Self.marked(text) == text)
    }

    /// A known false positive (docs/QUALITY.md, "Detectors"): the user and host of a git remote in
    /// scp form are an e-mail address syntactically, so the `email` detector finds them; the
    /// remote as a URL without a user is left alone.
    @Test(arguments: [
        ("git@github.com:org/repo.git", "<email>:org/repo.git"),
        ("clone git@gitlab.example.org:team/app.git failed", "clone <email>:team/app.git failed"),
        ("ssh://git@github.com/org/repo.git", "ssh://<email>/org/repo.git"),
        ("https://github.com/org/repo.git", "https://github.com/org/repo.git"),
    ])
    func gitRemotesInScpFormAreAddresses(text: String, expected: String) throws {
        #expect(Self.marked(text) == expected)
    }

    @Test func aGitRemoteIsMaskedAsAnAddress() throws {
        let judgement = try redacted(Self.configuration("mask"), event(properties: #"{"remote": "git@github.com:org/repo.git"}"#))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == #"{"remote":"g***@g***.com:org/repo.git"}"#)
    }

    @Test func aVersionMemberHoldsNoAddress() {
        #expect(Self.marked("built from 10.0.0.1", noIP: true) == "built from 10.0.0.1")
        #expect(Self.marked("built from 10.0.0.1") == "built from <ip>")
    }

    // MARK: Through the redactor

    static let allDetectors = #"{"kind": "email", "action": "ACTION"}, {"kind": "phone", "action": "ACTION"}, {"kind": "ip", "action": "ACTION"}, {"kind": "card", "action": "ACTION"}, {"kind": "iban", "action": "ACTION"}"#

    static func configuration(_ action: String) -> String {
        #"{"keyFile": "k", "detect": [\#(allDetectors.replacingOccurrences(of: "ACTION", with: action))]}"#
    }

    @Test func maskKeepsTheRestOfTheText() throws {
        let judgement = try redacted(Self.configuration("mask"), event(
            properties: #"{"memo": "paid with 4111 1111 1111 1111", "error": "timeout from 203.0.113.42 after 3 tries"}"#,
            context: #"{"page": {"url": "https://shop.example/reset?email=jane%40example.com&step=2&phone=%2B14155552671"}}"#))
        #expect(judgement.redacted)
        #expect(String(decoding: judgement.event.properties, as: UTF8.self)
            == #"{"memo":"paid with **** **** **** 1111","error":"timeout from 203.0.*.* after 3 tries"}"#)
        #expect(String(decoding: judgement.event.context, as: UTF8.self)
            == #"{"page":{"url":"https://shop.example/reset?email=j***@e***.com&step=2&phone=%2B*********71"}}"#)
    }

    @Test func hashJoinsWithTheWholeValue() throws {
        let judgement = try redacted(Self.configuration("hash"), event(
            properties: #"{"email": "jane@example.com", "note": "write to jane@example.com today"}"#,
            context: #"{"page": {"url": "https://x.example/r?e=jane%40example.com"}}"#))
        let tag = hmacTag("jane@example.com")
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == #"{"email":"\#(tag)","note":"write to \#(tag) today"}"#)
        #expect(String(decoding: judgement.event.context, as: UTF8.self) == #"{"page":{"url":"https://x.example/r?e=\#(tag)"}}"#)
    }

    @Test func dropRemovesTheValue() throws {
        let judgement = try redacted(Self.configuration("drop"), event(properties: #"{"memo": "card 4111111111111111", "plan": "pro 2"}"#,
                                                                        userID: "user jane@example.com"))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == #"{"plan":"pro 2"}"#)
        #expect(judgement.event.userID.isEmpty)
    }

    @Test func identifiersAreSearchedToo() throws {
        let judgement = try redacted(Self.configuration("mask"), event(properties: #"{"a": "b"}"#, userID: "auth0:jane@example.com"))
        #expect(judgement.event.userID == "auth0:j***@e***.com")
    }

    @Test func theInPlaceShortcutSeesTextToo() throws {
        let gate = QualityGate(plan: nil, allowUnplanned: true, redactor: try redactor(Self.configuration("mask")))
        for (properties, passes) in [(#"{"memo": "paid with 4111 1111 1111 1111"}"#, false), (#"{"memo": "order 12345678901"}"#, true)] {
            let frame = event(properties: properties).encoded()
            #expect(gate.passesUntouched(frame: frame, header: try EventHeader(frame)) == passes)
            #expect(gate.judge(event(properties: properties)).redacted == !passes)
        }
    }

    // MARK: Against an independent matcher

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Pieces generated text is made of: values of every kind (valid and near misses), the
    /// false-positive shapes, words, separators and URL parts.
    static func piece(_ choices: inout some RegexReference.Choices) -> String {
        func digits(_ count: Int) -> String { String((0..<count).map { _ in Character(String(choices.next(10))) }) }
        func luhn(_ prefix: String, length: Int) -> String {
            var body = prefix + digits(length - prefix.count - 1)
            for check in 0...9 where DetectorsInTextTests.luhnValid(body + String(check)) { body += String(check); break }
            return body
        }
        func grouped(_ text: String, by size: Int, _ separator: String) -> String {
            stride(from: 0, to: text.count, by: size).map { String(Array(text)[$0..<min($0 + size, text.count)]) }.joined(separator: separator)
        }
        let words = ["paid", "with", "call", "order", "at", "ip", "from", "version", "build", "v", "on", "id", "SKU", "DE", "x", "é"]
        let separators = [" ", " ", " ", ", ", ". ", ": ", "=", "(", ")", "/", "-", ":", ".", "", "@", "+", "&", "?", "#", "%40", "%2B", "+", "_"]
        switch choices.next(30) {
        case 0: return luhn(["4", "51", "37", "6011", "2221"][choices.next(5)], length: [13, 15, 16, 19][choices.next(4)])
        case 1: return grouped(luhn("4", length: 16), by: 4, [" ", "-"][choices.next(2)])
        case 2: return digits(13 + choices.next(7))  // mostly not Luhn
        case 3: return ["+1 415-555-2671", "(415) 555-2671", "415.555.2671", "+44 20 7946 0958", "020 7946 0958", "06 12 34 56 78",
                        "0171-1234567", "+\(digits(8 + choices.next(8)))", "1 415 555 2671"][choices.next(9)]
        case 4: return (0..<4).map { _ in String([choices.next(256), choices.next(300), choices.next(10), 0][choices.next(4)]) }.joined(separator: ".")
        case 5: return ["2001:db8::1", "fe80::1", "::1", "::ffff:10.0.0.1", "2001:0db8:0000:0000:0000:ff00:0042:8329", "1::", "12:00:00",
                        "00:1a:2b:3c:4d:5e", "std::b", "a:b::c:1"][choices.next(10)]
        case 6: return ["DE89370400440532013000", "DE89 3704 0044 0532 0130 00", "GB82 WEST 1234 5698 7654 32", "DE89370400440532013001",
                        "FR1420041010050500013M02606"][choices.next(5)]
        case 7: return ["jane", "j.doe", "a+b", "x_y", "bob"][choices.next(5)] + "@" + ["example.com", "mail.example.co.uk", "localhost", "x", "ex-ample.org"][choices.next(5)]
        case 8: return ["2024-05-01T12:00:00Z", "2024-05-01", "01.05.2024 10:00", "1700000000000", "0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0d",
                        "12345678-1234-1234-1234-123456789012", "1.2.3.4.5", "Chrome/120.0.0.0", "v1.2.3.4", "3.14"][choices.next(10)]
        case 9: return ["https://", "http://", "x://"][choices.next(3)] + ["shop.example", "10.1.2.3:8080", "[::1]"][choices.next(3)]
            + ["/", "/reset", "/users/"][choices.next(3)] + ["?", "?email=", "?v=", "?version=", "#", "?q=a&phone="][choices.next(6)]
        case 10...13: return digits(1 + choices.next(5))
        case 14...21: return separators[choices.next(separators.count)]
        default: return words[choices.next(words.count)]
        }
    }

    static func luhnValid(_ number: String) -> Bool {
        var sum = 0
        for (position, character) in number.reversed().enumerated() {
            var digit = character.wholeNumberValue!
            if position % 2 == 1 { digit = digit * 2 > 9 ? digit * 2 - 9 : digit * 2 }
            sum += digit
        }
        return sum % 10 == 0
    }

    static let texts = 3000

    @Test("3 000 generated texts: the parts found are those scripts/detector-oracle finds",
          .enabled(if: PythonReference.isAvailable, "needs /usr/bin/python3"))
    func agreesWithAnIndependentMatcher() async throws {
        var choices = RegexReference.Seeded(seed: 38)
        var cases: [(text: [UInt8], noIP: Bool)] = []
        for _ in 0..<Self.texts {
            var text = ""
            for _ in 0..<(1 + choices.next(12)) { text += Self.piece(&choices) }
            cases.append((Array(text.utf8), choices.next(8) == 0))
        }
        let requests = cases.map { Data(#"{"t": "\#($0.text.map { String(format: "%02x", $0) }.joined())", "noip": \#($0.noIP)}"#.utf8) }
        let oracle = Self.repository.appendingPathComponent("scripts/detector-oracle").path
        let answers: [String] = try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try PythonReference.answers(requests, arguments: [oracle]) }) }.start()
        }
        try #require(answers.count == cases.count, "the oracle answered \(answers.count) of \(cases.count) texts")
        var disagreements: [String] = []
        var found: [DetectorKind: Int] = [:]
        for (index, (text, noIP)) in cases.enumerated() {
            let ours = text.withUnsafeBytes { Detectors.matches(in: $0, kinds: .all, noIP: noIP) }
            // What the redactor asks (a whole value first, and only texts that could hold a part
            // searched) loses none of them.
            let key = Array((noIP ? "version" : "note").utf8)
            let finding = text.withUnsafeBytes { raw in
                key.withUnsafeBytes { Detectors.find(raw, kinds: .all, key: $0, prefiltered: false, inText: true) }
            }
            switch finding {
            case .parts(let parts)?: if parts != ours { disagreements.append("find \(text): \(parts) != \(ours)") }
            case nil: if !ours.isEmpty { disagreements.append("find \(String(decoding: text, as: UTF8.self)): nothing, matches \(ours)") }
            case .whole?: break
            }
            for match in ours { found[match.kind, default: 0] += 1 }
            let written = "[" + ours.map { "[\($0.start), \($0.end), \"\($0.kind.rawValue)\", \"\($0.encoding)\"]" }.joined(separator: ", ") + "]"
            if written != answers[index] {
                disagreements.append("\(String(decoding: text, as: UTF8.self).debugDescription) noIP \(noIP): ours \(written), oracle \(answers[index])")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.count) disagreements:\n\(disagreements.prefix(15).joined(separator: "\n"))")
        // Every kind is found often: the generator is not one-sided.
        for kind in DetectorKind.allCases { #expect(found[kind, default: 0] > 50, "\(kind): \(found[kind, default: 0]) found") }
    }
}
