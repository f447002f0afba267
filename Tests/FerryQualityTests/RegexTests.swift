@testable import FerryQuality
import Testing

@Suite struct RegexTests {
    @Test(arguments: [
        ("^abc$", "abc", true), ("^abc$", "abcd", false), ("b", "abc", true), ("^$", "", true),
        ("^[a-z0-9_-]+$", "order_id-7", true), ("^[a-z]+$", "Order", false), ("[^0-9]", "123", false), ("[^0-9]", "12a", true),
        ("^\\d{3}-\\d{4}$", "555-1234", true), ("^\\d{3}-\\d{4}$", "55-1234", false), ("^\\w+$", "a_1", true), ("^\\w+$", "a-1", false),
        ("^\\s*$", " \t", true), ("\\S", "  ", false), ("^\\D+$", "abc", true), ("^\\W$", "-", true),
        ("^(foo|bar)+$", "foobarfoo", true), ("^(foo|bar)+$", "foobaz", false), ("^(?:ab)?c$", "c", true), ("^(?<x>a)b$", "ab", true),
        ("^a{2}$", "aa", true), ("^a{2}$", "aaa", false), ("^a{2,}$", "aaaa", true), ("^a{2,3}$", "aaaa", false), ("^a*?b$", "aab", true),
        ("^colou?r$", "color", true), ("^colou?r$", "colour", true), ("\\bcat\\b", "a cat!", true), ("\\bcat\\b", "concat", false),
        ("\\Bcat", "concat", true), ("^.$", "é", true), ("^.$", "\n", false), ("^[é-ë]$", "ê", true), ("^\\u00e9$", "é", true),
        ("^\\x41$", "A", true), ("^a.c$", "a😀c", true), ("^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\/\\\\$", ".*+?()[]{}|/\\", true),
        ("x{", "x{", true), ("^[\\d.]+$", "1.2.3", true), ("^[\\w-]+$", "a-b", true), ("(a*)*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
        ("^(a|ab)(c|bcd)(d*)$", "abcd", true), ("^[]$", "", false), ("^[^]$", "x", true),
    ])
    func matches(pattern: String, text: String, expected: Bool) throws {
        #expect(try Regex(pattern).matches(text) == expected)
    }

    @Test(arguments: ["(?=a)", "(?!a)", "(?<=a)", "(?<!a)", "\\1", "\\p{L}", "\\k<n>", "\\cA", "(", ")", "*a", "a**", "[b-a]", "a{3,2}", "\\u{61}", "\\q", "a{2000}"])
    func refuses(pattern: String) {
        #expect(throws: Regex.SyntaxError.self) { try Regex(pattern) }
    }
}
