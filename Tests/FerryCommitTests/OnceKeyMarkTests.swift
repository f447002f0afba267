@testable import FerryAgent
import Testing

/// A once-key's mark in `<data>/consent/once.keys`: the first 128 bits of the key's SHA-256,
/// byte for byte as earlier versions stored it (recorded from the agent's own SHA-256 before
/// swift-crypto's replaced it; Python's hashlib gives the same), so marks written before an
/// upgrade still answer `duplicate`.
@Suite struct OnceKeyMarkTests {
    @Test func markIsTheKeysSHA256Prefix() {
        let mark = OnceKeyStore.Mark(key: "order-1")
        #expect(mark.bytes == [0x0b, 0xaf, 0xe2, 0x21, 0x56, 0xd2, 0x69, 0x8c, 0x14, 0x3b, 0x86, 0x04, 0x04, 0x46, 0xd3, 0x66])
        #expect(OnceKeyStore.Mark(bytes: mark.bytes[...]) == mark)
    }
}
