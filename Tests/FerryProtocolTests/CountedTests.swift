import FerryProtocol
import Testing

/// Messages and summary lines say `1 quarantined event`, not `1 quarantined events` (issues 37
/// and 39): one helper, in every module that counts things.
@Suite("counted: a count and its noun")
struct CountedTests {
    @Test("a count of one takes the singular, any other the plural", arguments: [
        (0, "0 quarantined events"), (1, "1 quarantined event"), (2, "2 quarantined events"),
    ])
    func counts(count: Int, expected: String) {
        #expect(counted(count, "quarantined event") == expected)
    }

    @Test("any integer type counts the same (UInt64 counters, Int counts)")
    func integerTypes() {
        #expect(counted(UInt64(1), "dead letter") == "1 dead letter")
        #expect(counted(UInt64(3), "dead letter") == "3 dead letters")
        #expect(counted(Int32(1), "error") == "1 error")
    }
}
